"""The `strata` command line: generate (streaming), models, report, trace.

    strata generate --model smollm2-135m-instruct --chat "What is the capital of France?"
    strata report --tenant demo
    strata report --run 3 --html run3.html --json run3.json
    strata trace 0af7651916cd43dd8448eb211c80319c

Everything goes through the gateway: STRATA_GATEWAY_ADDR (or --gateway); the key from
STRATA_API_KEY or the demo key file; --tls-ca (or STRATA_TLS_CA) when the gateway's public port
serves TLS. Reports and traces are the key's own tenant's (`--admin` on report and trace: the
admin key, every tenant). A gRPC error prints "error: CODE: details" and exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys

import grpc

from strata.client.format import format_models, format_summary, format_trace
from strata.client.placement_cli import add_placement_parser
from strata.client.profile_cli import add_profile_parser
from strata.client.replay_cli import add_replay_parser
from strata.client.report_cli import add_report_arguments, metrics_client, run_report
from strata.client.sdk import DEFAULT_MAX_TOKENS, AsyncClient
from strata.client.settings import ClientSettingError
from strata.client.tenants_cli import add_tenants_parser
from strata.core import defaults
from strata.security.identity import IdentityError

EXIT_ERROR = 2
DEFAULT_TIMEOUT_S = 300.0
_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


class _UsageError(ValueError):
    """An argument the server would refuse anyway, caught before connecting."""


async def _generate(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.prompt == "-" else args.prompt
    prompt, messages = (None, [("user", text)]) if args.chat else (text, None)
    out = sys.stdout
    last = None
    trace_id = ""
    at_line_start = True
    async with AsyncClient(args.gateway, tls_ca=args.tls_ca) as client:
        try:
            async for chunk in client.generate(
                args.model,
                prompt,
                messages,
                max_tokens=args.max_tokens,
                temperature=args.temperature,
                top_p=args.top_p,
                top_k=args.top_k,
                seed=args.seed,
                stop=args.stop,
                timeout=args.timeout,
            ):
                if chunk.text:
                    out.write(chunk.text)
                    out.flush()
                    at_line_start = chunk.text.endswith("\n")
                trace_id = chunk.trace_id or trace_id
                last = chunk
        finally:
            # The error or the summary goes to stderr; keep the shell prompt off the text's line.
            if not at_line_start:
                out.write("\n")
                out.flush()
    if last is None:
        print("error: the gateway ended the stream without sending any chunk", file=sys.stderr)
        return EXIT_ERROR
    print(format_summary(last.usage, last.finish_reason, trace_id), file=sys.stderr)
    return 0


async def _models(args: argparse.Namespace) -> int:
    async with AsyncClient(args.gateway, tls_ca=args.tls_ca) as client:
        models = await client.list_models()
    print(format_models(models))
    return 0


async def _report(args: argparse.Namespace) -> int:
    return await run_report(args)


async def _trace(args: argparse.Namespace) -> int:
    trace_id = args.trace_id.lower()
    if not _TRACE_ID.match(trace_id):
        raise _UsageError(f"a trace id is 32 hex characters, got {args.trace_id!r}")
    async with metrics_client(args) as client:
        trace = await client.trace(trace_id)
    if not trace.spans:
        print(
            f"error: no spans recorded for trace {trace_id} (spans arrive in batches about "
            f"a second apart; try again shortly)",
            file=sys.stderr,
        )
        return 1
    print(format_trace(trace))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="strata", description="Strata tenant command line.")
    parser.add_argument(
        "--gateway",
        help=f"gateway host:port (default: STRATA_GATEWAY_ADDR or {defaults.GATEWAY_ADDR})",
    )
    parser.add_argument(
        "--metrics",
        help="where reports and traces are read (default: the "
        "gateway, which serves them scoped to the key)",
    )
    parser.add_argument(
        "--tls-ca",
        help="PEM file of the authority that signed the gateway's "
        "TLS certificate (default: STRATA_TLS_CA; none: "
        "plaintext)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="stream a completion to stdout")
    gen.add_argument(
        "--model",
        default=defaults.DEFAULT_MODEL,
        help=f"model name (default {defaults.DEFAULT_MODEL})",
    )
    gen.add_argument(
        "--chat",
        action="store_true",
        help="send PROMPT as one user message through the model's chat template",
    )
    gen.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    gen.add_argument("--top-p", type=float, default=0.0, help="0 = disabled")
    gen.add_argument("--top-k", type=int, default=0, help="0 = disabled")
    gen.add_argument("--seed", type=int, help="makes sampling reproducible")
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    gen.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"deadline in seconds (default {DEFAULT_TIMEOUT_S:.0f})",
    )
    gen.add_argument("prompt", help="the prompt text, or - to read it from stdin")
    gen.set_defaults(handler=_generate)

    sub.add_parser("models", help="list the models the gateway serves").set_defaults(
        handler=_models
    )

    rep = sub.add_parser(
        "report",
        help="request, node and cluster figures of a run or of "
        "every request; HTML and JSON; runs compared",
    )
    add_report_arguments(rep)
    rep.set_defaults(handler=_report)

    tr = sub.add_parser("trace", help="show one request's spans as a tree")
    tr.add_argument(
        "trace_id",
        help="a trace id or a request id (32 hex characters each), as "
        "printed by `strata generate` or stored by `strata replay`",
    )
    tr.add_argument(
        "--admin",
        action="store_true",
        help="with the admin key: any tenant's trace (default: the API key's own)",
    )
    tr.set_defaults(handler=_trace)

    add_replay_parser(sub)
    add_profile_parser(sub)
    add_placement_parser(sub)
    add_tenants_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(args.handler(args))
    except grpc.RpcError as err:
        print(f"error: {err.code().name}: {err.details()}", file=sys.stderr)
    except (ClientSettingError, IdentityError, _UsageError) as err:
        print(f"error: {err}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
