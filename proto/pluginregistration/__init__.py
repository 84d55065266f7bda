"""Generated kubelet API stubs (see scripts/gen-proto)."""
