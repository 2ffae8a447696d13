"""README.md as a user reads it: short, linked to every page of docs/, and its quickstart works when pasted.

The quickstart is the first ```bash block after the heading "## Quickstart". Its commands run one by one,
each in its own `bash -c`, in an empty temporary directory, as a user pastes them in a fresh one:

- the cluster's data goes where the quickstart says, `./.kraftwerk` of that directory (the CLI's default
  --data-dir), so nothing is substituted for it;
- `kraftwerk up` gets `--port 0` appended, the one change made to what the README shows, so that this test
  runs beside other clusters instead of needing ports 9092-9094 free;
- `kraftwerk` on PATH is this checkout's command line (a shim running `cluster.cli.main` with this
  checkout first on PYTHONPATH), whether or not kraftwerk is pip-installed.

Every command must exit 0; `produce` must print nothing (a producer is quiet unless asked with
--print-offsets, as kcat and kafka-console-producer are); every `consume` must print exactly the values
produced to its topic so far, in any order across partitions.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 300

# `kraftwerk produce` options that take a value; every other word after the topic is a message.
PRODUCE_OPTIONS_WITH_VALUE = {"--key", "--partition", "--header", "--acks", "--data-dir", "--bootstrap-server"}


def test_readme_is_at_most_300_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move the detail to docs/"


def test_every_docs_page_is_linked_from_the_readme_and_every_link_resolves():
    readme_links = {link.split("#")[0] for link in markdown_links(README.read_text())}
    pages = {f"docs/{page.name}" for page in DOCS.glob("*.md")}
    assert len(pages) >= 5, pages
    assert pages <= readme_links, f"not linked from README.md: {sorted(pages - readme_links)}"
    for link in sorted(link for link in readme_links if link.startswith("docs/")):
        assert (ROOT / link).exists(), f"README.md links to {link}, which does not exist"


def test_every_relative_link_in_the_docs_resolves_to_a_file_and_heading():
    for document in [README, ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]:
        for link in markdown_links(document.read_text()):
            if re.match(r"[a-z]+:", link):
                continue  # an absolute URL
            path, _, anchor = link.partition("#")
            target = (document.parent / path).resolve() if path else document
            assert target.exists(), f"{document.name} links to {link}: no such file"
            if anchor and target.suffix == ".md":
                assert anchor in heading_anchors(target.read_text()), f"{document.name} links to {link}: no such heading"


def test_the_quickstart_runs_as_pasted(tmp_path):
    commands = quickstart_commands(README.read_text())
    assert commands[0].startswith("kraftwerk up") and commands[-1] == "kraftwerk down", commands
    workdir = tmp_path / "quickstart"
    workdir.mkdir()
    env = shell_environment(tmp_path)
    produced: dict[str, Counter] = {}
    consumed_once = False
    try:
        for command in commands:
            result = run_in_shell(as_tested(command), workdir, env)
            assert result.returncode == 0, f"{command!r} exited {result.returncode}:\n{result.stdout}{result.stderr}"
            words = shlex.split(command.partition("|")[2] or command)
            if words[:2] == ["kraftwerk", "produce"]:
                assert result.stdout == "" and result.stderr == "", f"{command!r} is not quiet:\n{result.stderr}"
                topic, values = produced_messages(command, workdir, env)
                produced.setdefault(topic, Counter()).update(values)
            elif words[:2] == ["kraftwerk", "consume"]:
                assert Counter(result.stdout.splitlines()) == produced.get(words[2], Counter()), command
                consumed_once = True
        assert consumed_once and produced, "the quickstart should produce and consume messages"
    finally:
        kill_what_is_left(workdir / ".kraftwerk")


def markdown_links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors: a heading lowercased, punctuation but - and _ dropped, spaces made -."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", strip_code_blocks(text), re.M):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return anchors


def strip_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def quickstart_commands(readme: str) -> list[str]:
    match = re.search(r"^## Quickstart\n.*?^```bash\n(.*?)^```", readme, re.M | re.S)
    assert match, "README.md has no ```bash block after a '## Quickstart' heading"
    return [line.strip() for line in match.group(1).splitlines() if line.strip() and not line.startswith("#")]


def as_tested(command: str) -> str:
    """The command as run here: `kraftwerk up` on free ports, all else as written."""
    if shlex.split(command)[:2] == ["kraftwerk", "up"]:
        return command + " --port 0"
    return command


def shell_environment(tmp_path: Path) -> dict[str, str]:
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    shim = shim_dir / "kraftwerk"
    shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "
                    "'from cluster.cli import main; main(prog_name=\"kraftwerk\")' \"$@\"\n")
    shim.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{shim_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def run_in_shell(command: str, workdir: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=180)


def produced_messages(command: str, workdir: Path, env: dict[str, str]) -> tuple[str, list[str]]:
    """(topic, the values a `kraftwerk produce` command sent): its arguments, or the lines piped into it."""
    source, pipe, sink = command.partition("|")
    words = shlex.split(sink if pipe else command)[2:]
    positional, skip_next = [], False
    for word in words:
        if skip_next:
            skip_next = False
        elif word in PRODUCE_OPTIONS_WITH_VALUE:
            skip_next = True
        elif not word.startswith("--"):
            positional.append(word)
    topic, values = positional[0], positional[1:]
    if pipe:
        values = run_in_shell(source, workdir, env).stdout.splitlines()
    return topic, values


def kill_what_is_left(data_dir: Path) -> None:
    state = data_dir / "cluster.json"
    if state.exists():  # a failed command may leave the cluster running: end its whole process group
        try:
            os.killpg(json.loads(state.read_text())["process_group"], signal.SIGKILL)
        except ProcessLookupError:
            pass
