"""``gpubus dashboard``: a live, read-only web view of the cluster, folded from the NATS event stream."""
