"""The ``gpubus tap`` command: print events from the stream, live or replayed, until stopped.

Wires the bus to :mod:`gpubus.tap` rendering; knows nothing about any service.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from gpubus.cloudevents import render_cloudevent
from gpubus.options import nats_url_problem
from gpubus.tap import (
    TapFilter,
    TapOptions,
    full_subject,
    render_json,
    render_undecodable,
    replay_from,
)
from gpubus.up_dir import DEFAULT_DATA_DIR, choose_nats_url
from shared.bus import Bus, BusSettings
from shared.config import load_settings
from shared.errors import BusUnavailable, EventDecodeError
from shared.event_text import render_line
from shared.events import Event


def register(app: typer.Typer) -> None:
    app.command("tap")(tap)


def tap(  # noqa: PLR0917 - typer maps parameters to the command line
    subject: Annotated[str, typer.Argument(help="Subject, e.g. 'gpubus.allocation.>' or 'allocation.>'.")]
    = "gpubus.>",
    since: Annotated[str | None, typer.Option(help="Replay history from this long ago (10m, 2h).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Replay the whole stored history first.")] = False,
    node: Annotated[str | None, typer.Option(help="Only events about this node.")] = None,
    pod: Annotated[str | None, typer.Option(help="Only events about this pod (NAMESPACE/NAME).")] = None,
    json_: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    cloudevents: Annotated[bool, typer.Option(
        "--cloudevents", help="One CloudEvents 1.0 JSON object per line (structured mode).")] = False,
    nats: Annotated[str | None, typer.Option(
        help="NATS URL (env GPUBUS_BUS_URL; default: the running `gpubus up`'s).")] = None,
    data_dir: Annotated[Path, typer.Option(
        help="The `gpubus up` data dir whose NATS to use without --nats or GPUBUS_BUS_URL.")]
    = DEFAULT_DATA_DIR,
    count: Annotated[int | None, typer.Option(help="Exit after printing this many events.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Exit after this many seconds.")] = None,
) -> None:
    """Print gpubus events one per line, live (and replayed first with --since/--all)."""
    try:
        if count is not None and count < 1:
            raise ValueError(f"--count {count}: must be at least 1")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"--timeout {timeout}: must be more than 0 seconds")
        if json_ and cloudevents:
            raise ValueError("--json and --cloudevents: give one or the other")
        options = TapOptions(subject=full_subject(subject), deliver=replay_from(since, all_, time.time()),
                             selector=TapFilter.parse(node, pod), as_json=json_,
                             as_cloudevents=cloudevents, count=count,
                             stop_after_s=timeout)
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    chosen = choose_nats_url(nats, os.environ, data_dir.expanduser())
    settings = load_settings(BusSettings, cli={"url": chosen.url, "name": "gpubus-tap",
                                               "initial_connect_timeout_s": 10.0}, env_prefix="GPUBUS_BUS_")
    problem = nats_url_problem(settings.url)
    if problem is not None:  # checked here, not by a callback: the URL may come from GPUBUS_BUS_URL
        typer.echo(f"error: {chosen.source}: {problem}", err=True)
        raise typer.Exit(2)
    try:
        asyncio.run(run_tap(settings, options))
    except BusUnavailable as e:
        typer.echo(f"error: {e} (the URL from {chosen.source})", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass


async def run_tap(settings: BusSettings, options: TapOptions) -> None:
    """Subscribe, print matching events until ``count`` lines or ``stop_after_s`` seconds."""
    done = asyncio.Event()
    printed = 0

    def emit(line: str) -> None:
        nonlocal printed
        if done.is_set():
            return
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        printed += 1
        if options.count is not None and printed >= options.count:
            done.set()

    async def on_event(event: Event) -> None:
        if options.selector.matches(event):
            emit(_render(event, options))

    async def on_bad(subject: str, data: bytes, error: EventDecodeError) -> None:
        if not options.selector.matches_subject(subject):
            return
        if options.as_cloudevents:  # stdout carries CloudEvents only
            sys.stderr.write(render_undecodable(subject, len(data), str(error), as_json=True) + "\n")
            return
        emit(render_undecodable(subject, len(data), str(error), as_json=options.as_json))

    bus = await Bus.connect(settings, source="tap")
    try:
        await bus.subscribe(options.subject, on_event, deliver=options.deliver, on_decode_error=on_bad)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), options.stop_after_s)
    finally:
        await bus.close()


def _render(event: Event, options: TapOptions) -> str:
    if options.as_cloudevents:
        return render_cloudevent(event)
    return render_json(event) if options.as_json else render_line(event)
