"""``gpubus node-agent``: flags -> settings -> :func:`services.node_agent.app.run` under ``run_service``.

Only option parsing lives here; every flag maps to a :class:`NodeAgentSettings` field (env
``GPUBUS_NODE_AGENT_<FIELD>``, file ``--config``) or to the bus settings (env ``GPUBUS_BUS_*``).
"""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from shared.cli_options import CommonOptions, bad_parameters, common_options, run_service
from shared.logs import setup_logging

Opt = typer.Option


@common_options("for the node register annotation")
def node_agent(
    *,
    node_name: Annotated[str | None, Opt(help="This node's name (env NODE_NAME).")] = None,
    simulate: Annotated[
        str | None, Opt(help="Simulated GPUs, e.g. 4xA100-80GB or 2x{name=Foo,mem=24576}.")
    ] = None,
    fail_on_init_error: Annotated[
        bool | None, Opt("--fail-on-init-error/--no-fail-on-init-error", help="Exit when NVML is missing.")
    ] = None,
    device_split_count: Annotated[int | None, Opt(help="Replicas per GPU (default 10).")] = None,
    device_memory_scaling: Annotated[float | None, Opt(help="Registered memory factor (default 1).")] = None,
    device_core_scaling: Annotated[float | None, Opt(help="Registered cores factor (default 1).")] = None,
    disable_core_limit: Annotated[bool | None, Opt("--disable-core-limit", help="No SM limiting.")] = None,
    gpu_core_policy: Annotated[str | None, Opt(help="default, force or disable.")] = None,
    resource_name: Annotated[str | None, Opt(help="Extended resource (default nvidia.com/gpu).")] = None,
    resource_memory_name: Annotated[str | None, Opt(help="Memory resource (nvidia.com/gpumem).")] = None,
    resource_cores_name: Annotated[str | None, Opt(help="Cores resource (nvidia.com/gpucores).")] = None,
    memory_factor: Annotated[int | None, Opt(help="MiB per memory unit (the scheduler's; 1).")] = None,
    publish_capacity: Annotated[
        bool | None,
        Opt("--publish-capacity/--no-publish-capacity", help="Memory and cores in the Node's capacity."),
    ] = None,
    hook_path: Annotated[str | None, Opt(help="Host dir with vgpu/libvgpu.so (default /usr/local).")] = None,
    libvgpu_version: Annotated[
        str | None, Opt(help="Mount vgpu/libvgpu.so.<this> when present (HAMi's versioned copy).")
    ] = None,
    gdrcopy_enabled: Annotated[bool | None, Opt("--gdrcopy-enabled", help="NVIDIA_GDRCOPY=enabled.")] = None,
    gds_enabled: Annotated[bool | None, Opt("--gds-enabled", help="NVIDIA_GDS=enabled.")] = None,
    mofed_enabled: Annotated[bool | None, Opt("--mofed-enabled", help="NVIDIA_MOFED=enabled.")] = None,
    plugin_dir: Annotated[str | None, Opt(help="Kubelet device plugin directory.")] = None,
    pod_resources_socket: Annotated[str | None, Opt(help="Kubelet pod resources socket ('' = off).")] = None,
    node_config_file: Annotated[str | None, Opt(help="HAMi per-node config.json.")] = None,
    filter_uuids: Annotated[str | None, Opt(help="Comma list of GPU UUIDs to hide.")] = None,
    filter_indexes: Annotated[str | None, Opt(help="Comma list of GPU indexes to hide.")] = None,
    heartbeat_s: Annotated[float | None, Opt(help="Inventory heartbeat, seconds.")] = None,
    metrics_port: Annotated[int | None, Opt(help="Prometheus port (0 = off).")] = None,
    mode: Annotated[str | None, Opt(help="extender (device plugin) or dra (DRA kubelet plugin).")] = None,
    dra_driver: Annotated[str | None, Opt(help="DRA driver name (default gpubus.io).")] = None,
    dra_registry_dir: Annotated[str | None, Opt(help="Kubelet plugin registration dir (DRA mode).")] = None,
    dra_plugin_dir: Annotated[str | None, Opt(help="DRA socket and claim state dir (DRA mode).")] = None,
    cdi_dir: Annotated[str | None, Opt(help="CDI spec dir for prepared claims (DRA mode).")] = None,
    common: CommonOptions,
) -> None:
    """Run the node-agent: GPU discovery, the kubelet device plugin and Allocate from bus decisions."""
    cli = common.settings_overrides(locals())
    from services.node_agent import settings as node_settings
    from services.node_agent.app import run

    with bad_parameters():
        settings = node_settings.load(cli, file=common.config)
        bus = common.bus(f"node-agent-{settings.node_name}")
    setup_logging(settings.log_level, settings.log_json)
    run_service("node-agent", functools.partial(run, settings, bus))


def register(app: typer.Typer) -> None:
    app.command("node-agent")(node_agent)
