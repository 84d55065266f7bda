"""The auth callout's pure parts: NATS JWTs, the request parser, the node permissions, the
TokenReview interpretation, and the client-side narrowing of node-scoped consumers.

Cases: a JWT round-trips and names its issuer; a changed claim, a foreign signature, the wrong
issuer kind, an expired or not-yet-valid token and garbage are refused; a request not signed by the
server it names, or without a user nkey, is a BadRequest; the node permissions name only the node's
own subjects and keys (dotted node names stay in their tokens); TokenReview statuses map to refusal
reasons; the filters a node-scoped route uses; the issuer key file.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from services.authn import callout, nkeyjwt
from services.authn.app import session_end
from services.authn.identity import PodClaim, Refusal, Refused, node_of, pod_claim, token_expiry
from services.authn.keys import write_seed
from services.authn.permissions import node_permissions
from shared.bus.scope import node_inbox_prefix, scoped_filters

NOW = 1_800_000_000
ACCOUNT = nkeyjwt.Signer.generate(nkeyjwt.PREFIX_ACCOUNT)
SERVER = nkeyjwt.Signer.generate(nkeyjwt.PREFIX_SERVER)
USER = nkeyjwt.Signer.generate(nkeyjwt.PREFIX_USER)


def test_jwt_round_trips_with_issuer_iat_and_jti() -> None:
    token = nkeyjwt.encode({"sub": USER.public_key, "nats": {"type": "user"}}, ACCOUNT, now=NOW)
    claims = nkeyjwt.decode(token, issuer_prefix=nkeyjwt.PREFIX_ACCOUNT, now=NOW)
    assert claims["iss"] == ACCOUNT.public_key and claims["iat"] == NOW and len(claims["jti"]) == 52
    assert json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "==")) == nkeyjwt.HEADER


def _tampered(token: str) -> str:
    head, body, sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["sub"] = "someone else"
    return f"{head}.{base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b'=').decode()}.{sig}"


@pytest.mark.parametrize(("make", "prefix", "message"), [
    (lambda: _tampered(nkeyjwt.encode({"sub": "x"}, ACCOUNT, now=NOW)), "A", "signature"),
    (lambda: nkeyjwt.encode({"sub": "x"}, ACCOUNT, now=NOW), "N", "public nkey"),
    (lambda: nkeyjwt.encode({"sub": "x", "exp": NOW - 1}, ACCOUNT, now=NOW - 10), "A", "expired"),
    (lambda: nkeyjwt.encode({"sub": "x", "nbf": NOW + 60}, ACCOUNT, now=NOW), "A", "not valid yet"),
    (lambda: "a.b", "A", "3 dot-separated"),
    (lambda: "!!.??.--", "A", "base64url|not JSON"),
    (lambda: "x" * (nkeyjwt.MAX_TOKEN_BYTES + 1), "A", "exceeds"),
])
def test_bad_jwts_are_refused(make: object, prefix: str, message: str) -> None:
    with pytest.raises(nkeyjwt.JwtError, match=message):
        nkeyjwt.decode(make(), issuer_prefix=prefix, now=NOW)  # type: ignore[operator]


def _request(signer: nkeyjwt.Signer = SERVER, server_id: str | None = None, **nats: object) -> bytes:
    body = {"server_id": {"id": server_id or signer.public_key, "name": "s", "host": "h"},
            "user_nkey": USER.public_key, "connect_opts": {"auth_token": "tok", "name": "agent"},
            "client_info": {"host": "10.0.0.1"}, "type": "authorization_request", "version": 2} | nats
    return nkeyjwt.encode({"sub": ACCOUNT.public_key, "aud": callout.REQUEST_AUDIENCE, "nats": body},
                          signer, now=NOW).encode()


def test_request_is_parsed_and_the_response_names_user_and_server() -> None:
    request = callout.parse_request(_request(), now=NOW)
    assert (request.token, request.client, request.user_nkey) == ("tok", "agent@10.0.0.1", USER.public_key)
    assert "tok" not in repr(request)
    answer = callout.allow(request, ACCOUNT, node_permissions("n1"), name="node:n1", account="GPUBUS",
                           expires=NOW + 60, now=NOW)
    response = nkeyjwt.decode(answer, issuer_prefix="A", now=NOW)
    assert (response["sub"], response["aud"]) == (USER.public_key, SERVER.public_key)
    user = nkeyjwt.decode(response["nats"]["jwt"], issuer_prefix="A", now=NOW)
    assert (user["sub"], user["aud"], user["exp"]) == (USER.public_key, "GPUBUS", NOW + 60)
    assert user["name"] == "node:n1"
    assert "$KV.inventory.n1" in user["nats"]["pub"]["allow"]
    no = callout.response(request, ACCOUNT, now=NOW, error="no")
    refused = nkeyjwt.decode(no, issuer_prefix="A", now=NOW)
    assert refused["nats"] == {"error": "no", "type": "authorization_response", "version": 2}


@pytest.mark.parametrize(("payload", "message"), [
    (lambda: _request(server_id=nkeyjwt.Signer.generate("N").public_key), "another key"),
    (lambda: _request(user_nkey="nope"), "user_nkey"),
    (lambda: _request(type="user"), "not an authorization request"),
    (lambda: _request(signer=ACCOUNT), "server-signed"),
    (lambda: b"\xff\xfe", "server-signed"),
])
def test_bad_requests(payload: object, message: str) -> None:
    with pytest.raises(callout.BadRequest, match=message):
        callout.parse_request(payload(), now=NOW)  # type: ignore[operator]


def test_node_permissions_name_only_the_nodes_own_subjects() -> None:
    p = node_permissions("gpu-1.example.com")
    assert "$KV.inventory.gpu-1.example.com" in p.publish
    assert not [s for s in p.publish if s.startswith("$KV.locks.") or ".KV_locks" in s]  # no leases, no info
    assert "gpubus.inventory.*.gpu-1_example_com" in p.publish
    assert "gpubus.allocation.released.gpu-1_example_com" in p.publish  # DRA mode's unprepare
    assert "gpubus.allocation.released.*" not in p.publish and "gpubus.allocation.decided.*" not in p.publish
    inbox = node_inbox_prefix("gpu-1.example.com")
    assert p.subscribe == (f"{inbox}.>", "gpubus.query.health.gpu-1_example_com")
    everything = " ".join(p.publish + p.subscribe)
    for broad in ("$JS.API.>", "$KV.>", "_INBOX.>", "gpubus.>", "$JS.API.CONSUMER.CREATE.GPUBUS ",
                  "DURABLE", "STREAM.CREATE", "STREAM.DELETE", "$JS.ACK"):
        assert broad not in everything + " "


STATUS = {"authenticated": True, "audiences": ["aud"],
          "user": {"username": "system:serviceaccount:ns:sa",
                   "extra": {"authentication.kubernetes.io/pod-name": ["p"],
                             "authentication.kubernetes.io/pod-uid": ["u"]}}}


@pytest.mark.parametrize(("status", "reason"), [
    ({"error": "[invalid bearer token]"}, Refusal.TOKEN_REJECTED),
    (STATUS | {"audiences": ["other"]}, Refusal.WRONG_AUDIENCE),
    (STATUS | {"user": {"username": "alice"}}, Refusal.NOT_A_POD_TOKEN),
    (STATUS | {"user": {"username": "system:serviceaccount:ns:other"}}, Refusal.SERVICE_ACCOUNT),
    (STATUS | {"user": {"username": "system:serviceaccount:ns:sa", "extra": {}}}, Refusal.NOT_A_POD_TOKEN),
])
def test_token_reviews_map_to_refusals(status: dict[str, object], reason: Refusal) -> None:
    with pytest.raises(Refused) as e:
        pod_claim(status, "aud", {"ns:sa"})
    assert e.value.reason is reason


def test_pod_is_read_back_for_its_node() -> None:
    claim = pod_claim(STATUS, "aud", {"ns:sa"})
    assert node_of(claim, {"metadata": {"uid": "u"}, "spec": {"nodeName": "n1"}}) == "n1"  # type: ignore[typeddict-item]
    for pod, reason in ((None, Refusal.POD_GONE), ({"metadata": {"uid": "v"}, "spec": {}}, Refusal.POD_GONE),
                        ({"metadata": {"uid": "u"}, "spec": {}}, Refusal.POD_NOT_ON_NODE)):
        with pytest.raises(Refused) as e:
            node_of(claim, pod)  # type: ignore[arg-type]
        assert e.value.reason is reason
    elsewhere = PodClaim(namespace="ns", service_account="sa", pod="p", pod_uid="u", node="n2")
    with pytest.raises(Refused, match="its token names n2"):
        node_of(elsewhere, {"metadata": {"uid": "u"}, "spec": {"nodeName": "n1"}})  # type: ignore[typeddict-item]


def test_token_expiry_is_read_from_the_reviewed_token() -> None:
    body = base64.urlsafe_b64encode(json.dumps({"exp": NOW}).encode()).rstrip(b"=").decode()
    assert token_expiry(f"h.{body}.s") == NOW
    assert token_expiry("garbage") is None


def test_scoped_filters_narrow_to_the_node_and_merge() -> None:
    assert scoped_filters(["gpubus.allocation.decided.*", "gpubus.allocation.released.*"], "n.1") == \
        ["gpubus.allocation.*.n_1"]
    assert scoped_filters(["gpubus.allocation.*.n1", "gpubus.allocation.released._",
                           "gpubus.inventory.snapshot.n1"], "n1") == \
        ["gpubus.allocation.*.n1", "gpubus.allocation.released._", "gpubus.inventory.snapshot.n1"]


def test_keygen_writes_a_private_seed_once(tmp_path: Path) -> None:
    path = tmp_path / "issuer.seed"
    public = write_seed(str(path))
    assert nkeyjwt.Signer.from_seed(path.read_bytes()).public_key == public
    assert public.startswith("A") and path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        write_seed(str(path))


def test_sessions_never_expire_unless_asked_and_then_not_past_the_token() -> None:
    assert session_end(NOW, 0, NOW + 5) is None  # nats-py would not reconnect after an expiry
    assert session_end(NOW, 60, NOW + 5) == NOW + 5
    assert session_end(NOW, 60, None) == NOW + 60
