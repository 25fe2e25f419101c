"""Rolling back: an older release's `turnflow migrate` (the chart's hook Job, run exactly as the
Job runs it) against a database a newer release migrated. It migrates nothing and succeeds in
one line when the newer release declared it compatible; it refuses in one line, exit 2, when the
newer release contracted the schema past it or declared nothing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from hypothesis import given
from hypothesis import strategies as st

import migrations
from store import migrate
from tests.helm.helm_chart import CHART_DIR, render_chart
from tests.store.migration_dbs import off_loop, rows, scratch_url

__all__ = ["scratch_url"]

_NEWER = '''"""A newer release's revision, for the rollback tests."""
import sqlalchemy as sa
from alembic import op

revision = "0099"
down_revision = "{head}"
branch_labels = None
depends_on = None
{declaration}

def upgrade() -> None:
    op.create_table("newer_things", sa.Column("id", sa.Integer, primary_key=True))


def downgrade() -> None:
    op.drop_table("newer_things")
'''


def _migrate_as_newer_release(tmp_path: Path, url: str, *, contracts: bool) -> None:
    """The shipped migrations plus one revision 0099 of a later release, run to its head: an
    expand-only one, or one declaring that code before 0099 must not run on it."""
    directory = tmp_path / "newer_migrations"
    shutil.copytree(Path(migrations.__file__).parent, directory,
                    ignore=shutil.ignore_patterns("__pycache__"))
    declaration = 'oldest_compatible_revision = "0099"' if contracts else ""
    (directory / "versions" / "0099_newer.py").write_text(
        _NEWER.format(head=migrate.head(), declaration=declaration)
    )
    config = Config(str(directory / "alembic.ini"))
    config.set_main_option("script_location", str(directory))
    config.attributes["url"] = url
    off_loop(command.upgrade, config, "head")


def _hook_command() -> list[str]:
    """The chart's migrate Job's command: the image's ENTRYPOINT (the Dockerfile's) followed by
    the container's args, with `turnflow` resolved to this environment's script."""
    job = render_chart().one("Job", "-migrate")
    container = job["spec"]["template"]["spec"]["containers"][0]
    dockerfile = (CHART_DIR.parents[1] / "Dockerfile").read_text()
    found = re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", dockerfile, re.MULTILINE)
    assert found, "the Dockerfile has no exec-form ENTRYPOINT"
    entrypoint = json.loads(found.group(1))
    assert "command" not in container  # the image's entrypoint is what runs
    assert entrypoint[0] == "turnflow"
    script = Path(sys.executable).parent / "turnflow"
    return [str(script), *entrypoint[1:], *container["args"]]


def _run_hook(url: str) -> subprocess.CompletedProcess[str]:
    job = render_chart().one("Job", "-migrate")
    env_values = {e["name"]: e.get("value") for e in
                  job["spec"]["template"]["spec"]["containers"][0]["env"]}
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DATABASE_URL": url}
    env.update({k: v for k, v in env_values.items() if v is not None})
    return subprocess.run(_hook_command(), env=env, capture_output=True, text=True, timeout=120)


def test_the_hook_migrates_an_older_database_and_records_who_may_run_on_it(
    scratch_url: str,
) -> None:
    """On a database of the previous release the hook migrates to head in one line, and the
    compatibility record names head and the oldest revision whose code runs on it."""
    off_loop(migrate.upgrade, scratch_url, "0018")
    done = _run_hook(scratch_url)
    assert done.returncode == 0, done
    assert done.stdout.count("\n") == 1 and done.stderr == ""
    head = migrate.head()
    assert rows(scratch_url, "SELECT revision, oldest_compatible FROM schema_compatibility") == [
        (head, "0003")
    ]


def test_rolling_back_to_this_release_on_a_compatible_newer_schema_succeeds(
    scratch_url: str, tmp_path: Path
) -> None:
    """A newer release added a table and declared nothing: this release's hook exits 0 with
    one line and leaves the newer schema and its revision as they are."""
    _migrate_as_newer_release(tmp_path, scratch_url, contracts=False)
    assert off_loop(migrate.current, scratch_url) == "0099"
    done = _run_hook(scratch_url)
    assert done.returncode == 0, done
    assert done.stderr == "" and done.stdout.count("\n") == 1, done
    assert "revision 0099" in done.stdout and "nothing migrated" in done.stdout
    assert off_loop(migrate.current, scratch_url) == "0099"
    assert rows(scratch_url, "SELECT to_regclass('newer_things') IS NOT NULL") == [(True,)]


def test_rolling_back_past_a_contracting_release_is_refused_in_one_line(
    scratch_url: str, tmp_path: Path
) -> None:
    """A newer release declared that code before its revision 0099 must not run on its schema:
    the hook exits 2 with one line saying which release to deploy, and changes nothing."""
    _migrate_as_newer_release(tmp_path, scratch_url, contracts=True)
    refused = _run_hook(scratch_url)
    assert refused.returncode == 2, refused
    assert refused.stdout == "" and refused.stderr.count("\n") == 1, refused
    assert "0099 or newer" in refused.stderr
    assert off_loop(migrate.current, scratch_url) == "0099"


def test_a_newer_schema_without_a_compatibility_record_is_refused(
    scratch_url: str, tmp_path: Path
) -> None:
    """No record (a release that wrote none, or a hand-stamped database): refused, exit 2."""
    _migrate_as_newer_release(tmp_path, scratch_url, contracts=False)
    rows(scratch_url, "DELETE FROM schema_compatibility")
    refused = _run_hook(scratch_url)
    assert refused.returncode == 2, refused
    assert refused.stderr.count("\n") == 1 and "declares no compatible release" in refused.stderr


_TEXT = st.text(max_size=40)


@given(current=st.one_of(st.none(), _TEXT, st.sampled_from(["0001", "0019", "0099"])),
       record=st.one_of(st.none(), st.tuples(_TEXT, _TEXT),
                        st.tuples(st.just("0099"), st.sampled_from(["0001", "0019", "0099"]))))
def test_any_record_is_accepted_or_refused_with_one_line(
    current: str | None, record: tuple[str, str] | None
) -> None:
    """Whatever revision and record the database holds, the check answers None (a revision
    these migrations know: upgrade), or a verdict with a one-line reason; it never raises."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(migrate, "_record", lambda url: (current, record))
        verdict = migrate.compatibility("postgresql://unused/db")
    if current is None or migrate.knows(current):
        assert verdict is None
    else:
        assert verdict is not None
        assert verdict.reason and "\n" not in verdict.reason and "\r" not in verdict.reason
        assert verdict.runs == (record is not None and record[0] == current
                                and migrate.knows(record[1]))
