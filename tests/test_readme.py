"""The README's commands run as written: every ``edgeml`` line of its shell blocks, in order, in a fresh working
folder (its TOML example saved as the ``my.toml`` a command names), each exiting 0; and none of them touches a
file git tracks or leaves one it does not ignore. The set-up commands (venv, pip) are what CI itself runs; the
``torchrun`` example needs two machines and stays out."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", README, flags=re.S)


def _commands() -> list[str]:
    out = []
    for lang, body in BLOCKS:
        if lang != "bash":
            continue
        for line in body.splitlines():
            line = re.split(r"\s{2,}#", line)[0].strip()
            if line.startswith("edgeml "):
                out.append(line)
    return out


COMMANDS = _commands()


def _status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                          text=True).stdout


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    where = tmp_path_factory.mktemp("readme")
    toml = [body for lang, body in BLOCKS if lang == "toml"]
    assert toml, "the README's config example is gone"
    (where / "my.toml").write_text(toml[0])
    return where


def test_the_readme_shows_commands():
    assert len(COMMANDS) >= 8 and any(c.startswith("edgeml reproduce") for c in COMMANDS)


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_a_readme_command_runs_as_written(folder, command):
    from edgeml.data import locate

    config = (folder / "my.toml").read_text() if "my.toml" in command else ""
    if "fashion-mnist" in command + config:
        try:
            locate("fashion-mnist")
        except Exception:  # the README says so: read from Debian's dataset-fashion-mnist, else refused
            pytest.skip("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
    before = _status() if (ROOT / ".git").exists() else None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    args = shlex.split(command)
    p = subprocess.run([sys.executable, "-m", "edgeml", *args[1:]], cwd=folder, capture_output=True, text=True,
                       timeout=900, env=env)
    assert p.returncode == 0, f"{command}\n{p.stderr[-3000:]}"
    if before is not None:
        assert _status() == before, f"{command} changed the repository:\n{_status()}"
