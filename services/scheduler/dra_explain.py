"""``gpubus explain --pending``'s core for DRA mode: why is a pod's claim not allocated?

kube-scheduler allocates claims, so its own word comes first (the pod's last ``FailedScheduling``
message); then what gpubus can add: for each request of the pod's claims of our driver, every
card of every ResourceSlice with its free memory and cores (capacity minus what allocated claims
consume on it), and whether the request would fit there by capacity and taints. CEL selectors are
kube-scheduler's to evaluate; the report says a request has them. Pure: objects in, report out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from shared import dra
from shared.requests import parse_quantity

Json = Mapping[str, Any]


class CardReport(TypedDict):
    node: str
    device: str
    product: str
    memory_mib: int
    free_memory_mib: int
    cores: int
    free_cores: int
    fits: bool
    why: str


class RequestReport(TypedDict):
    claim: str
    request: str
    allocated: bool
    count: int
    memory_mib: int | None
    """None: the card's default, the whole card."""
    cores: int
    selectors: list[str]
    cards: list[CardReport]
    fitting_nodes: list[str]


class Report(TypedDict):
    pod: str
    phase: str
    scheduler: str
    requests: list[RequestReport]


def _mib(quantity: object) -> int:
    return -(-parse_quantity(quantity) // dra.MIB)


def _used(claims: Iterable[Json], driver: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(pool, device) -> (MiB, cores) consumed by allocated claims."""
    used: dict[tuple[str, str], tuple[int, int]] = {}
    for claim in claims:
        for r in dra.results(claim, driver):
            mem, cores = used.get((r.pool, r.device), (0, 0))
            used[(r.pool, r.device)] = (mem + (_mib(r.memory) if r.memory else 0),
                                        cores + (parse_quantity(r.cores) if r.cores else 0))
    return used


def _cards(slices: Iterable[Json], driver: str,
           used: Mapping[tuple[str, str], tuple[int, int]]) -> list[CardReport]:
    out: list[CardReport] = []
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != driver:
            continue
        pool = str((spec.get("pool") or {}).get("name", ""))
        for d in spec.get("devices") or []:
            capacity = d.get("capacity") or {}
            memory = _mib((capacity.get(dra.MEMORY) or {}).get("value", "0"))
            cores = parse_quantity((capacity.get(dra.CORES) or {}).get("value", "0"))
            mem_used, cores_used = used.get((pool, str(d.get("name"))), (0, 0))
            taints = [str(t.get("key")) for t in d.get("taints") or []
                      if t.get("effect") in ("NoSchedule", "NoExecute")]
            out.append(CardReport(
                node=str(spec.get("nodeName") or pool), device=str(d.get("name", "")),
                product=str(((d.get("attributes") or {}).get("productName") or {}).get("string", "")),
                memory_mib=memory, free_memory_mib=memory - mem_used, cores=cores,
                free_cores=cores - cores_used,
                fits=not taints, why=f"tainted {', '.join(taints)}" if taints else ""))
    return out


def _fit(card: CardReport, memory_mib: int | None, cores: int) -> CardReport:
    if not card["fits"]:
        return card
    wanted = card["memory_mib"] if memory_mib is None else memory_mib
    if wanted > card["free_memory_mib"]:
        return {**card, "fits": False,
                "why": f"memory: asks {wanted} MiB, {card['free_memory_mib']} MiB free"}
    if cores > card["free_cores"]:
        return {**card, "fits": False, "why": f"cores: asks {cores} %, {card['free_cores']} % free"}
    return card


def _requests(claim: Json, device_class: str) -> Iterable[tuple[str, Json]]:
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        exactly = request.get("exactly") or {}
        if exactly.get("deviceClassName") == device_class:
            yield str(request.get("name", "")), exactly


def explain_pending(pod: Json, claims: Sequence[Json], slices: Sequence[Json], allocated: Sequence[Json],
                    events: Sequence[Json], *, driver: str = dra.DRIVER,
                    device_class: str = dra.DRIVER) -> Report:
    """The pod, its claims (those it names), every slice, every allocated claim, the pod's events."""
    meta = pod.get("metadata") or {}
    cards = _cards(slices, driver, _used(allocated, driver))
    failed = [e for e in events if e.get("reason") == "FailedScheduling"]
    last = max(failed, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""), default=None)
    requests: list[RequestReport] = []
    for claim in claims:
        is_allocated = bool((claim.get("status") or {}).get("allocation"))
        for name, exactly in _requests(claim, device_class):
            asked = (exactly.get("capacity") or {}).get("requests") or {}
            memory = _mib(asked[dra.MEMORY]) if dra.MEMORY in asked else None
            cores = parse_quantity(asked.get(dra.CORES, "0"))
            fitted = [_fit(c, memory, cores) for c in cards]
            count = int(exactly.get("count", 1))
            per_node: dict[str, int] = {}
            for c in fitted:
                per_node[c["node"]] = per_node.get(c["node"], 0) + int(c["fits"])
            requests.append(RequestReport(
                claim=str((claim.get("metadata") or {}).get("name", "")), request=name,
                allocated=is_allocated, count=count, memory_mib=memory, cores=cores,
                selectors=[str((s.get("cel") or {}).get("expression", ""))
                           for s in exactly.get("selectors") or []],
                cards=fitted, fitting_nodes=sorted(n for n, k in per_node.items() if k >= count)))
    return Report(pod=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
                  phase=str((pod.get("status") or {}).get("phase", "")),
                  scheduler=str(last.get("message", "")) if last else "", requests=requests)


def render(report: Report) -> str:
    """The human view: kube-scheduler's reason, then each request against each card."""
    lines = [f"pod {report['pod']}: {report['phase'] or 'unknown phase'}"]
    lines.append(f"kube-scheduler: {report['scheduler'] or '(no FailedScheduling event)'}")
    if not report["requests"]:
        lines.append("no claim of the pod asks for a gpubus GPU")
    for r in report["requests"]:
        memory = "the whole card" if r["memory_mib"] is None else f"{r['memory_mib']} MiB"
        state = "allocated" if r["allocated"] else "not allocated"
        lines.append(f"claim {r['claim']} request {r['request']} ({state}): {r['count']} card(s), "
                     f"{memory} and {r['cores']} % of each")
        if r["selectors"]:
            lines.append(f"  selectors (kube-scheduler evaluates them): {'; '.join(r['selectors'])}")
        for c in r["cards"]:
            verdict = "fits" if c["fits"] else f"no: {c['why']}"
            lines.append(f"  {c['node']}/{c['device']} {c['product']}: {c['free_memory_mib']} of "
                         f"{c['memory_mib']} MiB free, {c['free_cores']} of {c['cores']} % cores free: "
                         f"{verdict}")
        nodes = ", ".join(r["fitting_nodes"]) or "none"
        lines.append(f"  nodes with {r['count']} fitting card(s): {nodes}")
    return "\n".join(lines)
