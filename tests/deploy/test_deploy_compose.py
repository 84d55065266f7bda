"""docker-compose.yml, checked without a Docker engine: parsed, and every command parsed by the real CLI.

Case matrix: each gpubus container's command line against ``gpubus <command>`` (a command that
does not exist yet skips only its own case, naming it) and against the child ``gpubus up``
starts for the same part, but for where it listens and whom it calls (containers reach each
other by service name); published ports against the ports the flags configure; the image each
service runs (production or sim target); healthchecks behind every ``service_healthy``
dependency; no dependency cycle; NATS with JetStream on a volume; the one-shot certificate step
run for real. tests/image/test_image_stack.py runs the file with podman.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from clicheck import parse
from cryptography import x509
from helmchart import ROOT

COMPOSE = ROOT / "docker-compose.yml"
#: compose service -> the ``gpubus`` command it runs (``gpubus up`` names its children the same way).
GPUBUS_SERVICES = {"control": "sim-control", "kube-scheduler": "sim-kube-scheduler", "webhook": "webhook",
                   "scheduler": "scheduler", "nodes": "sim-nodes", "dashboard": "dashboard"}
#: Flags whose values differ on purpose: compose keeps ready files inside each container, and the
#: pod logs on the state volume the API server and the nodes share (`gpubus up`: in /dev/shm).
CONTAINER_LOCAL_FLAGS = {"--ready-file", "--pod-log-dir"}
#: Where a part listens and whom it calls: compose names containers where `gpubus up` has 127.0.0.1.
NETWORK_FLAGS = {"--host", "--bind", "--metrics-bind", "--webhook-url", "--extender-url"}
#: The services of the product itself run the production image; the simulator's parts the sim target.
PRODUCTION_SERVICES = {"webhook", "scheduler", "dashboard"}
#: Every published port is on the host's loopback only: the sim API server, the extender and the
#: dashboard have no login of their own (docs/security.md).
PORT = re.compile(r"127\.0\.0\.1:\$\{(?P<variable>\w+):-(?P<default>\d+)\}:(?P<container>\d+)")


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # type: ignore[no-any-return]


def _services() -> dict[str, dict[str, Any]]:
    return _compose()["services"]  # type: ignore[no-any-return]


def _command(service: str) -> list[str]:
    command = _services()[service]["command"]
    return shlex.split(command) if isinstance(command, str) else list(command)


def _flag(args: list[str], name: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return values[-1] if values else None


def test_compose_runs_nats_the_pipeline_and_the_simulated_cluster() -> None:
    assert set(_services()) == {"nats", "certs", *GPUBUS_SERVICES}
    assert all(_services()[name]["depends_on"]["nats"] == {"condition": "service_healthy"}
               for name in GPUBUS_SERVICES)


@pytest.mark.parametrize("service", GPUBUS_SERVICES)
def test_service_command_parses_with_the_real_cli(service: str) -> None:
    command, *flags = _command(service)
    assert command == GPUBUS_SERVICES[service]
    parse(command, flags)


def _flags(argv: list[str]) -> dict[str, str]:
    """``--a=1 --b 2 --c`` -> {"--a": "1", "--b": "2", "--c": ""}."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value, i = argv[i + 1], i + 1
        flags[name] = value
        i += 1
    return flags


def _gpubus_up_built(data_dir: Path) -> dict[str, Any]:
    """The children ``gpubus up`` would start with the compose stack's ports and ``data_dir``."""
    stack_module = pytest.importorskip("gpubus_local.stack",
                                       reason="`gpubus up` (gpubus_local/stack.py) not written yet")
    tls_module = pytest.importorskip("gpubus_local.stack_tls")
    spec = stack_module.StackSpec(data_dir=data_dir, nodes=4, devices="4xA100-80GB",
                                  nats_url="nats://nats:4222", port_base=17000, log_level="info")
    stack = stack_module.Stack(spec)
    stack.ports = stack_module.Ports(apiserver=17000, webhook=17001, scheduler=17002, monitor=17003,
                                         dashboard=17004)
    stack.tls = tls_module.ensure_webhook_tls(data_dir / "tls")
    # The one place that knows the children's flags and environment; compose must stay the same stack.
    return dict(stack._build_children())


def _gpubus_up_children(data_dir: Path) -> dict[str, list[str]]:
    """argv of each child, from the subcommand on."""
    children = _gpubus_up_built(data_dir)
    return {name: child.argv[child.argv.index("gpubus") + 1:] for name, child in children.items()}


@pytest.mark.parametrize("service", GPUBUS_SERVICES)
def test_service_runs_what_gpubus_up_runs_for_the_same_part(service: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    children = _gpubus_up_children(state)
    assert set(children) == set(GPUBUS_SERVICES)
    expected = children[service]
    actual = [arg.replace("/state", str(state)) for arg in _command(service)]
    assert actual[0] == expected[0]
    wanted, got = _flags(expected[1:]), _flags(actual[1:])
    for flags in (wanted, got):
        for name in CONTAINER_LOCAL_FLAGS | NETWORK_FLAGS:
            flags.pop(name, None)
    assert got == wanted


def test_parts_call_each_other_by_service_name_on_the_ports_they_listen_on() -> None:
    flags = {name: _flags(_command(name)[1:]) for name in GPUBUS_SERVICES}
    assert flags["control"]["--host"] == "control"
    assert flags["control"]["--webhook-url"] == f"https://webhook:{flags['webhook']['--port']}/mutate"
    assert flags["kube-scheduler"]["--extender-url"] == f"http://scheduler:{flags['scheduler']['--port']}"
    assert all(_flag(_command(name), "--nats") in (None, "nats://nats:4222") for name in GPUBUS_SERVICES)


def test_the_api_server_reads_pod_logs_where_the_nodes_write_them_on_the_shared_volume() -> None:
    dirs = {name: _flags(_command(name)[1:]).get("--pod-log-dir") for name in ("control", "nodes")}
    assert dirs["control"] == dirs["nodes"] and str(dirs["control"]).startswith("/state/")
    assert all("state:/state" in _services()[name]["volumes"] for name in dirs)


@pytest.mark.parametrize("service", GPUBUS_SERVICES)
def test_service_gets_the_environment_gpubus_up_gives_the_same_part(service: str, tmp_path: Path) -> None:
    defaults = _gpubus_up_built(tmp_path / "state")[service].env_defaults
    environment = _services()[service]["environment"]
    assert {name: environment.get(name) for name in defaults} == defaults


def _dockerfile_stages() -> list[str]:
    return re.findall(r"^FROM \S+ AS (\S+)$", (ROOT / "deploy" / "Dockerfile").read_text(), re.MULTILINE)


@pytest.mark.parametrize("service", [*GPUBUS_SERVICES, "certs"])
def test_gpubus_services_run_the_production_or_the_sim_image_of_the_dockerfile(service: str) -> None:
    spec = _services()[service]
    build = dict(spec["build"])
    assert build.pop("context") == "." and build.pop("dockerfile") == "deploy/Dockerfile"
    if service in PRODUCTION_SERVICES:  # the Dockerfile's last stage, as `docker build` makes it
        assert spec["image"] == "${GPUBUS_IMAGE:-gpubus:dev}" and build == {}
        assert _dockerfile_stages()[-1] == "production"
    else:
        assert spec["image"] == "${GPUBUS_SIM_IMAGE:-gpubus-sim:dev}" and build == {"target": "sim"}
        assert "sim" in _dockerfile_stages()
    assert spec["environment"]["GPUBUS_BUS_URL"] == "nats://nats:4222"


def test_every_listening_port_is_published_by_its_own_service() -> None:
    services = _services()
    for name in GPUBUS_SERVICES:
        flags = _flags(_command(name)[1:])
        port = flags.get("--port") or flags.get("--metrics-port")  # None: listens on nothing
        ports = services[name].get("ports", [])
        published = [m.group("container") for p in ports if (m := PORT.fullmatch(p))]
        assert published == ([port] if port else []), f"{name} listens on {port}, publishes {published}"
        if port:  # reachable from the other containers and through the published port
            address = flags.get("--host") or flags.get("--bind") or flags.get("--metrics-bind")
            assert address in ("0.0.0.0", name), f"{name} listens on {address} only"


def test_no_service_shares_another_s_network_namespace() -> None:
    """podman-compose 1.0 (Debian's) cannot run ``network_mode``; every part is on the project network."""
    assert all("network_mode" not in spec for spec in _services().values())


def test_host_ports_are_unique_and_each_can_be_moved() -> None:
    ports = [PORT.fullmatch(p) for s in _services().values() for p in s.get("ports", [])]
    assert all(ports), "each host port is 127.0.0.1:${VARIABLE:-default}:container"
    for group in ("variable", "default"):
        values = [m.group(group) for m in ports if m]
        assert len(values) == len(set(values)), group
    assert all(m.group("default") == m.group("container") for m in ports if m)


def test_nats_keeps_jetstream_on_a_volume_and_reports_health() -> None:
    nats = _services()["nats"]
    assert nats["image"].startswith("${NATS_IMAGE:-nats:2.")  # scripts/image's own where none can be pulled
    assert "--jetstream" in nats["command"]
    assert "nats-data:/data" in nats["volumes"] and "nats-data" in _compose()["volumes"]
    assert "--store_dir=/data" in nats["command"]
    assert "healthz" in " ".join(nats["healthcheck"]["test"])


def test_every_long_running_service_has_a_healthcheck() -> None:
    for name in GPUBUS_SERVICES:
        flags = _flags(_command(name)[1:])
        check = " ".join(_services()[name]["healthcheck"]["test"])
        ready_file = flags.get("--ready-file")
        assert (ready_file is not None and ready_file in check) or f":{flags['--port']}/" in check, name


def test_dependencies_wait_for_health_and_have_no_cycle() -> None:
    services = _services()
    graph = {name: dict(spec.get("depends_on", {})) for name, spec in services.items()}
    for name, deps in graph.items():
        for dep, rule in deps.items():
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep}, which has no healthcheck"
            else:
                assert rule["condition"] == "service_completed_successfully"
                assert services[dep]["restart"] == "no"
    for name in GPUBUS_SERVICES:
        assert graph[name]["nats"] == {"condition": "service_healthy"}
    _assert_acyclic(graph)


def _assert_acyclic(graph: dict[str, dict[str, Any]]) -> None:
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"dependency cycle: {' -> '.join((*path, node))}"
        if node not in done:
            for dep in graph[node]:
                visit(dep, (*path, node))
            done.add(node)

    for node in graph:
        visit(node, ())


def _run_certs_step(tmp_path: Path) -> Path:
    """Run the ``certs`` service's script with /state moved to a temp dir; returns that dir."""
    spec = _services()["certs"]
    assert spec["entrypoint"] == ["python", "-c"]
    [code] = spec["command"]
    state = tmp_path / "state"
    state.mkdir()
    exec(compile(code.replace("/state", str(state)), "docker-compose certs", "exec"), {})
    return state


def test_certificate_step_makes_the_files_the_webhook_and_sim_read(tmp_path: Path) -> None:
    tls = _run_certs_step(tmp_path) / "tls"
    made = {p.name for p in tls.iterdir()}
    wanted = {_flag(_command("webhook"), "--cert"), _flag(_command("webhook"), "--key"),
              _flag(_command("control"), "--webhook-ca")}
    assert {Path(str(w)).name for w in wanted} <= made
    assert all(os.stat(tls / name).st_mode & 0o044 == 0o044 for name in made)


def test_webhook_certificate_names_the_address_the_api_server_calls(tmp_path: Path) -> None:
    tls = _run_certs_step(tmp_path) / "tls"
    cert = x509.load_pem_x509_certificate((tls / "webhook.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    host = re.match(r"https://([^:/]+)", str(_flag(_command("control"), "--webhook-url")))
    assert host is not None
    names = {*sans.get_values_for_type(x509.DNSName), *map(str, sans.get_values_for_type(x509.IPAddress))}
    assert host.group(1) in names


# -- the 3-server NATS cluster override ---------------------------------------------------------

CLUSTER = ROOT / "deploy" / "compose" / "nats-cluster.yml"


def test_cluster_override_runs_three_routed_jetstream_servers_on_volumes_of_their_own() -> None:
    override = yaml.safe_load(CLUSTER.read_text())
    servers = {name: s for name, s in override["services"].items() if name.startswith("nats")}
    assert set(servers) == {"nats", "nats-2", "nats-3"}
    flags = {name: dict(a.removeprefix("--").split("=", 1) for a in s["command"] if "=" in a)
             for name, s in servers.items()}
    assert all("--jetstream" in s["command"] for s in servers.values())
    assert len({f["server_name"] for f in flags.values()}) == 3
    assert {f["cluster_name"] for f in flags.values()} == {"gpubus"}
    for name, f in flags.items():
        routed = {r.removeprefix("nats://").split(":")[0] for r in f["routes"].split(",")}
        assert routed == set(servers) - {name}, name
    volumes = [s["volumes"][0].split(":")[0] for n, s in servers.items() if n != "nats"]
    assert len(set(volumes)) == 2 and set(volumes) <= set(override["volumes"])
    assert "nats-data" in {v.split(":")[0] for v in _services()["nats"]["volumes"]}  # the base keeps its own


def test_cluster_override_gives_every_service_that_makes_the_schema_three_replicas() -> None:
    # The dashboard reads the stream and buckets and never creates them: it needs no replicas.
    override = yaml.safe_load(CLUSTER.read_text())["services"]
    makers = {name for name in GPUBUS_SERVICES if _flag(_command(name), "--nats")} - {"dashboard"}
    assert makers == {"webhook", "scheduler", "nodes"}
    assert all(override[name]["environment"]["GPUBUS_BUS_REPLICAS"] == "3" for name in makers)
