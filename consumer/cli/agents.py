"""``turnflow agents``: the registry of agents stored as data, their workspaces and credits.

- ``put FILE [--activate]``: check the definition (JSON) against the installed packs (``PACKS``)
  and store it as the agent's next version (the same document again stores nothing);
- ``list [--workspace W]``, ``show AGENT [--version N]``, ``diff AGENT A [B]`` (B: the live one);
- ``activate AGENT VERSION``: make a version live (rolling back is activating an older one);
  every consumer answers with it from each conversation's next turn with no run in progress,
  within ``AGENT_REFRESH_MS``, without a restart; it prints what stays on other versions;
- ``activate AGENT VERSION --percent N``: a canary, N% (1-99) of new conversations, chosen by
  session id; 100 promotes it; activating any version clears it (a roll-back);
- ``activate AGENT VERSION --check N [--accept-changes]``: first replay the agent's last N
  conversations against the version (identical / CHANGED / UNDECIDABLE each); any change or
  undecidable conversation refuses the activation (exit 1) unless ``--accept-changes``;
- ``activate AGENT VERSION --migrate MAP``: a checked map of old ``flow/step`` ids to the
  version's; conversations whose every run is mapped move to it at their next turn;
- ``versions AGENT``: per version, the conversations still pinned to it and where they wait;
- ``workspace ID [--create] [--plan P] [--agents on|off] [--web-searches-per-day N|none]``:
  an unknown workspace is refused unless ``--create`` (a typo never makes a new one);
- ``credits [--workspace W] [--since DAY] [--until DAY]``: credits per workspace per UTC day.

A refused definition prints where and why (the flow and step) and exits 2; nothing is stored.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import date
from pathlib import Path
from typing import Any

from consumer.cli.arguments import whole_number
from consumer.cli.database_failures import describe
from consumer.cli.running import EXIT_CONFIG, EXIT_UNREACHABLE, fail
from consumer.errors import AgentImportError
from consumer.settings import Settings

__all__ = ["add_arguments", "run"]

EXIT_CHANGED = 1  # --check found changes: nothing activated


def _day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError("not a date YYYY-MM-DD") from None


def _per_day(value: str) -> int | None:
    if value == "none":
        return None
    return whole_number(0)(value)


def _switch(value: str) -> bool:
    if value not in ("on", "off"):
        raise argparse.ArgumentTypeError("on or off")
    return value == "on"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    put = actions.add_parser("put", help="check a definition and store it as a new version")
    put.add_argument("file", help="the agent definition (JSON); - reads stdin")
    put.add_argument("--activate", action="store_true", help="make the version live")
    put.add_argument("--packs", help="the packs to check against (default: $PACKS)")
    listing = actions.add_parser("list", help="the agents, their live and latest versions")
    listing.add_argument("--workspace")
    show = actions.add_parser("show", help="print a version's document (default: the live one)")
    show.add_argument("agent_id")
    show.add_argument("--version", type=whole_number(1))
    diff = actions.add_parser("diff", help="the changes between two versions")
    diff.add_argument("agent_id")
    diff.add_argument("old", type=whole_number(1))
    diff.add_argument("new", type=whole_number(1), nargs="?", help="default: the live version")
    activate = actions.add_parser("activate", help="make a version live (or roll back)")
    activate.add_argument("agent_id")
    activate.add_argument("version", type=whole_number(1))
    activate.add_argument(
        "--percent", type=whole_number(1),
        help="a canary: this share (1-99) of new conversations takes the version, chosen by "
        "session id; 100 promotes it",
    )
    activate.add_argument(
        "--check", type=whole_number(1), metavar="N",
        help="first replay the agent's last N conversations against the version; refuse when "
        "any changed",
    )
    activate.add_argument(
        "--migrate", metavar="MAP",
        help='a JSON file mapping old "flow/step" ids to the version\'s: conversations whose '
        "every run is mapped move to the version at their next turn; the others stay pinned",
    )
    activate.add_argument("--accept-changes", action="store_true",
                          help="with --check: activate even when conversations changed")
    activate.add_argument("--packs", help="with --check: the packs to build with "
                          "(default: $PACKS)")
    versions = actions.add_parser(
        "versions", help="each version: conversations still pinned to it, and where they wait"
    )
    versions.add_argument("agent_id")
    workspace = actions.add_parser("workspace", help="create or change a workspace's plan")
    workspace.add_argument("workspace_id")
    workspace.add_argument(
        "--create", action="store_true",
        help="create the workspace when it does not exist (otherwise an unknown one is refused)",
    )
    workspace.add_argument("--plan")
    workspace.add_argument("--agents", type=_switch, help="on or off: the plan includes agents")
    workspace.add_argument(
        "--web-searches-per-day", type=_per_day, default=argparse.SUPPRESS,
        help="the daily web-search limit (none: no limit)",
    )
    credits = actions.add_parser("credits", help="credits per workspace per UTC day")
    credits.add_argument("--workspace")
    credits.add_argument("--since", type=_day)
    credits.add_argument("--until", type=_day)


def run(args: argparse.Namespace) -> int:
    from engine.definition import DefinitionError
    from store.hosting import RegistryError

    settings = Settings()
    if not settings.database_url:
        return fail("DATABASE_URL is not set", EXIT_CONFIG)
    handler: Callable[[Any, argparse.Namespace, Settings], Awaitable[int]] = _ACTIONS[args.action]
    try:
        if args.action == "put":  # read before the loop starts: a file read blocks
            args.raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
        if args.action == "activate" and args.migrate is not None:
            args.migrate_raw = Path(args.migrate).read_bytes()
        return asyncio.run(_with_hosting(settings.database_url, handler, args, settings))
    except (DefinitionError, RegistryError, AgentImportError) as exc:
        return fail(str(exc), EXIT_CONFIG)
    except OSError as exc:
        return fail(f"cannot read: {exc}", EXIT_CONFIG)


async def _with_hosting(
    url: str,
    handler: Callable[[Any, argparse.Namespace, Settings], Awaitable[int]],
    args: argparse.Namespace,
    settings: Settings,
) -> int:
    from sqlalchemy.exc import DBAPIError

    from store import Store
    from store.hosting import Hosting

    try:
        store = await Store.connect(
            url, pool_size=1, max_overflow=0, pooler=settings.database_pooler
        )
    except (OSError, DBAPIError) as exc:
        return fail(describe(exc).line, EXIT_UNREACHABLE)
    try:
        return await handler(Hosting(store.engine), args, settings)
    finally:
        await store.close()


async def _put(hosting: Any, args: argparse.Namespace, settings: Settings) -> int:
    from consumer.hosting.packs import load_packs
    from engine.definition import check_definition, definition_digest
    from engine.strict_json import loads

    raw: bytes = args.raw
    packs = load_packs(args.packs if args.packs is not None else settings.packs)
    definition, _agent = check_definition(raw, packs)
    document = loads(raw)
    result = await hosting.put_version(
        agent_id=definition.agent_id,
        workspace=definition.workspace,
        document=document,
        digest=definition_digest(document),
        activate=args.activate,
    )
    what = "stored as" if result.created else "unchanged: already"
    live = "none" if result.live_version is None else result.live_version
    print(f"{_show(result.agent_id)} {what} version {result.version} "
          f"(workspace {_show(result.workspace)}, live {live})")
    return 0


async def _list(hosting: Any, args: argparse.Namespace, settings: Settings) -> int:
    from store.registry_input import skeleton

    rows = await hosting.list_agents(args.workspace)
    # Ids that differ but look alike (a Cyrillic o, a decomposed e-acute): marked, with the others.
    looks: dict[str, list[str]] = {}
    for row in rows:
        looks.setdefault(skeleton(row.agent_id), []).append(row.agent_id)
    print("workspace\tagent\tlive\tlatest\tversions\tlooks like")
    for row in rows:
        live = "-" if row.live_version is None else row.live_version
        others = [other for other in looks[skeleton(row.agent_id)] if other != row.agent_id]
        alike = ", ".join(json.dumps(other) for other in others) if others else "-"
        print(f"{_show(row.workspace)}\t{_show(row.agent_id)}\t{live}\t{row.latest_version}\t"
              f"{row.versions}\t{alike}")
    return 0


async def _show_version(hosting: Any, args: argparse.Namespace, settings: Settings) -> int:
    found = await hosting.version(args.agent_id, args.version)
    print(_pretty(found.document))
    return 0


async def _diff(hosting: Any, args: argparse.Namespace, settings: Settings) -> int:
    old = await hosting.version(args.agent_id, args.old)
    new = await hosting.version(args.agent_id, args.new)
    lines = difflib.unified_diff(
        _pretty(old.document).splitlines(keepends=True),
        _pretty(new.document).splitlines(keepends=True),
        fromfile=f"version {old.version}",
        tofile=f"version {new.version}",
    )
    sys.stdout.writelines(lines)
    return 0


async def _activate(hosting: Any, args: argparse.Namespace, settings: Settings) -> int:
    from store.hosting import RegistryError

    percent = getattr(args, "percent", None)
    if percent is not None and percent > 100:
        raise RegistryError("--percent must be between 1 and 100")
    migrate = None
    if getattr(args, "migrate", None) is not None:
        if percent is not None and percent < 100:
            raise RegistryError("--migrate moves conversations to a live version, not a canary")
        migrate = await _run_map(hosting, args)
    if args.check is not None and not await _checked(hosting, args, settings):
        return EXIT_CHANGED
    if percent is not None and percent < 100:
        await hosting.set_canary(args.agent_id, args.version, percent)
        print(f"{_show(args.agent_id)}: version {args.version} answers {percent}% of new "
              f"conversations (canary); the rest stay on the live version")
        return 0
    await hosting.activate(args.agent_id, args.version, migrate)
    print(f"{_show(args.agent_id)}: version {args.version} is live")
    if migrate is not None:
        print(f"runs mapped to version {args.version}: {len(migrate)} flow/step ids; a "
              "conversation moves at its next turn when every run it has is mapped")
    staying = [v for v in (await _drain(hosting, args.agent_id)).versions
               if v.version != args.version]
    if not staying:
        print("no conversation stays on another version")
    for pinned in staying:
        print(f"version {pinned.version} keeps {pinned.conversations} conversation"
              f"{'' if pinned.conversations == 1 else 's'} until their runs end: "
              f"{_waits(pinned.waits)}")
    return 0


def _flow_steps(document: Any) -> set[str]:
    """Every ``flow/step`` id of a stored definition."""
    found: set[str] = set()
    for flow in document.get("flows") or []:
        if isinstance(flow, dict):
            for step in flow.get("steps") or []:
                if isinstance(step, dict):
                    found.add(f"{flow.get('id')}/{step.get('id')}")
    return found


async def _run_map(hosting: Any, args: argparse.Namespace) -> dict[str, str]:
    """The ``--migrate`` file, checked: an object of ``"flow/step": "flow/step"`` whose keys
    name a step of an earlier version and whose values a step of this one."""
    from store.hosting import RegistryError

    try:
        mapping = json.loads(args.migrate_raw)
    except ValueError as exc:
        raise RegistryError(f"--migrate {args.migrate}: not JSON ({exc})") from None
    if not isinstance(mapping, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
    ):
        raise RegistryError('--migrate: a JSON object of "flow/step": "flow/step" is expected')
    target = await hosting.version(args.agent_id, args.version)
    new_steps = _flow_steps(target.document)
    old_steps: set[str] = set()
    for version in range(1, args.version):
        try:
            old_steps |= _flow_steps((await hosting.version(args.agent_id, version)).document)
        except RegistryError:
            continue  # a version missing from the registry names no step
    for old, new in sorted(mapping.items()):
        if old not in old_steps:
            raise RegistryError(f"--migrate: {old!r} is no flow/step of an earlier version")
        if new not in new_steps:
            raise RegistryError(f"--migrate: {new!r} is no flow/step of version {args.version}")
    return mapping


async def _checked(hosting: Any, args: argparse.Namespace, settings: Settings) -> bool:
    """Replay the agent's last ``--check`` conversations against the version and print each
    verdict; False (nothing activated) when any changed and ``--accept-changes`` is not given."""
    from consumer.hosting.packs import load_packs
    from replay.check import check_version
    from store import Store

    await hosting.version(args.agent_id, args.version)  # refused at once if there is none
    packs = load_packs(args.packs if args.packs is not None else settings.packs)
    assert settings.database_url is not None
    store = await Store.connect(
        settings.database_url, pool_size=1, max_overflow=0, pooler=settings.database_pooler
    )
    try:
        verdicts = await check_version(store, packs, args.agent_id, args.version, args.check)
    finally:
        await store.close()
    for verdict in verdicts:
        print(verdict.line())
    changed = sum(1 for v in verdicts if v.verdict == "CHANGED")
    undecidable = sum(1 for v in verdicts if v.verdict == "UNDECIDABLE")
    print(f"checked {len(verdicts)} conversations against version {args.version}: "
          f"{len(verdicts) - changed - undecidable} identical, {changed} changed, "
          f"{undecidable} undecidable")
    if (changed or undecidable) and not args.accept_changes:
        print(f"turnflow: not activated: {changed} conversations changed, {undecidable} "
              "undecidable (--accept-changes activates anyway)", file=sys.stderr)
        return False
    return True


async def _versions(hosting: Any, args: argparse.Namespace, settings: Settings) -> int:
    from store.hosting import RegistryError

    rows = [r for r in await hosting.list_agents() if r.agent_id == args.agent_id]
    if not rows:
        raise RegistryError(f"no agent {_show(args.agent_id)}")
    row = rows[0]
    found = await _drain(hosting, args.agent_id)
    current = (await hosting.live([args.agent_id]))[args.agent_id]
    print("version\tlive\tconversations\twaiting")
    for version in range(1, row.latest_version + 1):
        pinned = found.pinned(version)
        live = "live" if version == row.live_version else (
            f"canary {current.canary_percent}%" if version == current.canary_version else "-"
        )
        count = 0 if pinned is None else pinned.conversations
        waits = "-" if pinned is None else _waits(pinned.waits)
        print(f"{version}\t{live}\t{count}\t{waits}")
    return 0


async def _drain(hosting: Any, agent_id: str) -> Any:
    from store.drain import drain

    return await drain(hosting.engine, agent_id)


def _waits(waits: Any) -> str:
    """Where runs wait, most first: ``flow/step status[ kind] count``, ``; ``-joined."""
    parts = []
    for wait in waits:
        where = f"{_show(wait.flow_id)}/{_show(wait.step_id)} {wait.status}"
        parts.append(f"{where}{'' if wait.wait is None else ' ' + wait.wait} {wait.runs}")
    return "; ".join(parts) or "-"


async def _workspace(hosting: Any, args: argparse.Namespace, settings: Settings) -> int:
    from store.hosting import RegistryError

    limit_given = hasattr(args, "web_searches_per_day")
    if not args.create and await hosting.workspace(args.workspace_id) is None:
        raise RegistryError(
            f"no workspace {_show(args.workspace_id)}; --create creates it"
        )
    plan = await hosting.set_workspace(
        args.workspace_id,
        plan=args.plan,
        agents_enabled=args.agents,
        web_searches_per_day=args.web_searches_per_day if limit_given else None,
        set_web_searches_per_day=limit_given,
    )
    limit = "none" if plan.web_searches_per_day is None else plan.web_searches_per_day
    print(f"workspace {_show(plan.workspace)}: plan {_show(plan.plan)}, agents "
          f"{'on' if plan.agents_enabled else 'off'}, web searches per day {limit}")
    return 0


async def _credits(hosting: Any, args: argparse.Namespace, settings: Settings) -> int:
    rows = await hosting.daily_credits(workspace=args.workspace, since=args.since,
                                       until=args.until)
    print("day\tworkspace\tcredits\tturns")
    for row in rows:
        workspace = "-" if row.workspace is None else _show(row.workspace)
        print(f"{row.day.isoformat()}\t{workspace}\t{row.credits}\t{row.turns}")
    return 0


def _pretty(document: Any) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _show(value: str) -> str:
    """An id as printed: JSON-quoted when it holds anything a terminal would hide or act on."""
    plain = value.isprintable() and value.strip() == value and "\t" not in value and value
    return value if plain else json.dumps(value)


_ACTIONS: dict[str, Callable[[Any, argparse.Namespace, Settings], Awaitable[int]]] = {
    "put": _put,
    "list": _list,
    "show": _show_version,
    "diff": _diff,
    "activate": _activate,
    "versions": _versions,
    "workspace": _workspace,
    "credits": _credits,
}
