"""The HAMi resource-name settings the scheduler and the webhook share, declared once.

Both services derive GPU requests from pods the same way (:mod:`shared.requests`), so they must
be told the same resource names, defaults and memory factor. Their settings classes inherit
these fields, which keeps them flat: the env names (``GPUBUS_<SERVICE>_RESOURCE_NAME`` ...), YAML
keys and flags stay those of the service. Knows nothing about either service.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.requests import DEFAULT_NAMES, ResourceNames


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceNameSettings:
    """HAMi's ``nvidia:`` device config, as settings fields; :meth:`names` is what request derivation sees.

    The defaults come from :data:`shared.requests.DEFAULT_NAMES`: one source, so they cannot drift apart.
    """

    resource_name: str = DEFAULT_NAMES.count
    """Cards per container (HAMi resourceCountName); same value in the scheduler and the webhook."""
    resource_mem: str = DEFAULT_NAMES.memory
    """MiB per card; ``limits.<this>`` in a ResourceQuota caps a namespace's GPU memory."""
    resource_mem_percentage: str = DEFAULT_NAMES.memory_percentage
    """% of each card's memory (HAMi resourceMemoryPercentageName)."""
    resource_cores: str = DEFAULT_NAMES.cores
    """% of SMs per card; ``limits.<this>`` in a ResourceQuota caps a namespace's cores."""
    resource_priority: str = DEFAULT_NAMES.priority
    """Task priority (HAMi resourcePriorityName)."""
    default_mem: int = DEFAULT_NAMES.default_memory
    """MiB given to a card request with neither memory nor percentage (0 = the whole card)."""
    default_cores: int = DEFAULT_NAMES.default_cores
    """Cores (% of a card) given when none are requested."""
    default_gpu_num: int = DEFAULT_NAMES.default_gpu_num
    """Cards implied by a memory/cores request without a count (0 = imply nothing)."""
    memory_factor: int = DEFAULT_NAMES.memory_factor
    """``gpumem`` values (and memory quotas) are multiplied by this (HAMi memoryFactor)."""

    def names(self) -> ResourceNames:
        """The request derivation settings: the same in every service given the same values."""
        return ResourceNames(
            count=self.resource_name,
            memory=self.resource_mem,
            memory_percentage=self.resource_mem_percentage,
            cores=self.resource_cores,
            priority=self.resource_priority,
            default_memory=self.default_mem,
            default_cores=self.default_cores,
            default_gpu_num=self.default_gpu_num,
            memory_factor=self.memory_factor,
        )
