"""The mutating admission webhook: which pods are gpubus's, HAMi's defaults, refusals, schedulerName."""
