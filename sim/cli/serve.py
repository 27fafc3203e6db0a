"""`batchsim serve SCENARIO`: the scenario's engine behind a live OpenAI-compatible endpoint.

Requests join the simulated engine when they arrive on the wall clock (times `--speed`) and
their tokens are sent when the simulation emits them (`sim.serve`). Ctrl-C or SIGTERM stops
it: requests in flight get `--drain-s` seconds to finish, the rest are aborted, and the results
folder is written as `run` writes it (`<out>/<name>--serve/`: requests, steps, summary, report).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from sim.cli.args import examples, float_between, nonnegative_int
from sim.errors import ScenarioError

LIVE_DEFAULTS = ("metrics.warmup_s=0", "metrics.cooldown_s=0")
MAX_PORT = 65535


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve", help="serve a scenario's simulated engine on an OpenAI-compatible endpoint",
        **examples("batchsim serve scenarios/quickstart.yaml --variant continuous --port 8000",
                   "batchsim serve scenarios/quickstart.yaml --port 8000 --per-instance"),
    )  # fmt: skip
    p.add_argument("scenario", type=Path, help="scenario YAML file")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8000,
                   help="port, 0 to 65535 (default 8000; 0: any free port, printed)")
    p.add_argument("--speed", type=float_between(1e-3, 1e3), default=1.0,
                   help="simulated seconds per wall second (default 1)")  # fmt: skip
    p.add_argument("--variant", default=None, help="the variant to serve (default: the first)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario field, as in run")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("results"),
                   help="parent folder of the results written at the stop (default: results)")
    p.add_argument("--tokenizer", type=Path, default=None, metavar="DIR",
                   help="a local tokenizers/transformers folder (tokenizer.json) that counts "
                   "prompt tokens (default: one token per 4 bytes)")
    p.add_argument("--model-name", default=None,
                   help="the model name clients send (default: the scenario's model)")
    p.add_argument("--per-instance", action="store_true",
                   help="one port per instance (port, port+1, ...): an external router decides")
    p.add_argument("--drain-s", type=float_between(0, 3600, " seconds"), default=0.0,
                   help="wall seconds requests in flight get to finish at a stop before they "
                   "are cut (default 0: cut at once)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    p.set_defaults(handler=_serve)


def _port(text: str) -> int:
    value = nonnegative_int(text)
    if value > MAX_PORT:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0 to {MAX_PORT})")
    return value


def _serve(args: argparse.Namespace) -> int:
    from sim.cli.signals import defer_interrupts
    from sim.io.destination import check_destination, results_folder_name
    from sim.io.output import format_summary, write_results
    from sim.scenario.load import load_scenario
    from sim.serve.live import LiveEngine
    from sim.serve.server import Server
    from sim.serve.tokens import Tokens

    # a served session's summary counts every request it served, unless --set says otherwise
    scenario = load_scenario(args.scenario, [*LIVE_DEFAULTS, *args.overrides])
    names = [v.variant for v in scenario.variants]
    chosen = args.variant if args.variant is not None else names[0]
    if chosen not in names:
        raise ScenarioError(f"no variant {chosen!r}; the scenario has {names}", path="--variant")
    resolved = scenario.variants[names.index(chosen)]
    folder = results_folder_name(scenario.name, args.overrides) + "--serve"
    dest = check_destination(args.out, folder)
    try:
        tokens = Tokens(args.tokenizer)
    except ValueError as exc:
        raise ScenarioError(str(exc), path="--tokenizer") from None
    engine = LiveEngine(resolved, speed=args.speed)
    if args.per_instance and (resolved.spec.disaggregation is not None or any(
            g.autoscale is not None for g in resolved.groups)):  # fmt: skip
        raise ScenarioError("needs a fixed fleet of whole-request instances (no P/D pools, no "
                            "autoscaling)", path="--per-instance")  # fmt: skip
    if args.per_instance and args.port and args.port + engine.num_instances() - 1 > MAX_PORT:
        raise ScenarioError(f"{engine.num_instances()} instances need ports {args.port} to "
                            f"{args.port + engine.num_instances() - 1}, past {MAX_PORT}",
                            path="--port")  # fmt: skip
    model = args.model_name or resolved.spec.model.name
    server = Server(engine, tokens, model, resolved.spec.model.max_model_len,
                    drain_s=args.drain_s)  # fmt: skip
    # from the first stop signal on, the stop writes the results whatever a second one does
    server.on_stop = defer_interrupts

    # a scenario of several variants serves one: say which when the user did not pick it
    picked = (f" (the first of {', '.join(names)}; --variant picks another)"
              if args.variant is None and len(names) > 1 else "")  # fmt: skip

    def ready(ports: list[int]) -> None:
        if not args.quiet:
            where = ", ".join(f"http://{args.host}:{p}/v1" for p in ports)
            print(f"serving {scenario.name} variant {chosen}{picked} (model {model}) at "
                  f"{where}; speed {args.speed:g}; Ctrl-C stops and writes {dest}/", flush=True)

    try:
        asyncio.run(server.serve(args.host, args.port, args.per_instance, ready))
    except OSError as exc:
        raise ScenarioError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}",
                            path="--port") from None  # fmt: skip
    defer_interrupts()  # a stop that did not come from a signal (an engine's fault)
    results = engine.close(scenario.name)
    session = {"scenario": scenario.name, "variant": chosen, "model": model,
               "speed": args.speed, "file": str(args.scenario)}  # fmt: skip
    # SIGTERM asks for a prompt exit (process managers kill what lingers): no plots, which take
    # seconds; Ctrl-C (SIGINT) or an engine's fault draws them
    plots = server.stop_signal != signal.SIGTERM
    session["plots"] = plots
    write_results(results, dest, scenario.dump(), progress=False, plots=plots, report=False,
                  extra_files=lambda folder: _write_session(folder, session))  # fmt: skip
    if server.failed is not None:
        why = (str(server.failed).splitlines() or [""])[0][:200]
        print(f"batchsim: error: the simulated engine failed ({type(server.failed).__name__}: "
              f"{why}); what it served is in {dest}/", file=sys.stderr)  # fmt: skip
        return 1
    if not args.quiet:
        print(format_summary(results.summary()))
        print(f"served {len(results.variants[chosen].requests)} requests; results in {dest}/"
              + ("" if plots else " (stopped by SIGTERM: no plots; Ctrl-C draws them)"))
    sys.stdout.flush()
    return 0


def _write_session(folder: Path, session: dict[str, Any]) -> None:
    """`session.json` (what was served), then the report, which names the session."""
    import json

    from sim.io.report import SESSION_FILE, write_report

    (folder / SESSION_FILE).write_text(json.dumps(session, indent=2) + "\n", encoding="utf-8")
    write_report(folder)
