"""The README's first commands are the ones that set dlbench up, run its main job and test it as CI does:
the setup is the script ``.ci/run`` uses too, the test command is what CI runs, the store the UI line opens
is the one dlbench writes, and the setup brings every engine's package (onnx2torch without a CUDA
torchvision)."""

from __future__ import annotations

import re
import shlex
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from helpers import REPO
from packaging.requirements import Requirement

from dlbench.tracking.store import resolve_tracking

CI = REPO / ".ci" / "run"
#: how CI starts: `bash .ci/run` in a fresh clone (the workplace's CI, as the README's test command says)
CI_COMMAND = ["bash", ".ci/run"]
DEFAULT = re.compile(r"\$\{\w+:-([^}]*)\}")


def first_block() -> list[str]:
    """The lines of the README's first ```bash block."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^```bash\n(.*?)^```", readme, flags=re.S | re.M)
    assert block, "the README has no ```bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def commands(line: str) -> list[list[str]]:
    """The commands of one shell line joined by ``&&``, as argument lists, comments dropped."""
    argv = shlex.split(line, comments=True)
    parts, current = [], []
    for word in argv:
        if word == "&&":
            parts.append(current)
            current = []
        else:
            current.append(word)
    return [*parts, current] if current else parts


def script_commands(path: Path) -> list[list[str]]:
    """Every command of a shell script, line by line (``${VAR:-default}`` read as its default)."""
    found = []
    for line in path.read_text(encoding="utf-8").replace("\\\n", " ").splitlines():  # continued lines joined
        found += [[DEFAULT.sub(r"\1", w) for w in argv] for argv in commands(line) if argv]
    return found


def pip_installs(path: Path) -> list[list[str]]:
    """The arguments of each ``pip install`` of a script."""
    pip = ["-m", "pip", "install"]
    return [argv[argv.index("install") + 1 :] for argv in script_commands(path) if argv[1:4] == pip]


def requirements(args: list[str]) -> list[Requirement]:
    """The packages named by ``pip install`` arguments (options and the project's own folder left out)."""
    return [Requirement(a) for a in args if a[0] not in "-."]


def pyproject() -> dict:
    import tomllib  # Python 3.11 on

    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_readme_opens_with_setup_and_sweep_then_the_ui_then_the_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # dlbench's own default, as on a fresh machine
    setup_and_run, ui, tests = (commands(line) for line in first_block())
    setup, sweep = setup_and_run
    assert setup[0] == "bash" and (REPO / setup[1]).is_file(), setup
    assert sweep == [".venv/bin/python", "-m", "dlbench", "+benchmark=conv"]
    assert tests == [CI_COMMAND]
    [ci_setup] = [argv for argv in script_commands(CI) if argv[:2] == setup[:2]]  # the same script, called once
    ci_extras, readme_extras = (set((a[2:] or ["dev"])[0].split(",")) for a in (ci_setup, setup))
    assert readme_extras <= ci_extras, "CI installs at least what the README's setup does"
    [ui_argv] = ui
    assert ui_argv[:3] == [".venv/bin/mlflow", "ui", "--backend-store-uri"]
    folder = Path("/some/clone")
    assert resolve_tracking("", "", folder).uri == f"sqlite:///{folder / ui_argv[3].removeprefix('sqlite:///')}"


def test_the_quick_check_runs_pytest_from_the_venv_the_setup_makes() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    second = re.findall(r"^```bash\n(.*?)^```", readme, flags=re.S | re.M)[1]
    assert commands(second.strip()) == [[".venv/bin/python", "-m", "pytest", "-q"]]
    assert "pytest" in {Requirement(r).name for r in pyproject()["optional-dependencies"]["dev"]}


@pytest.mark.parametrize("script", [CI, REPO / "scripts" / "setup.sh"], ids=lambda p: p.name)
def test_the_scripts_parse(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)


def test_the_setup_installs_onnx2torch_without_torchvision_and_with_everything_else_it_needs() -> None:
    project = pyproject()
    [inference] = (Requirement(r) for r in project["optional-dependencies"]["inference"])
    setup = pip_installs(REPO / "scripts" / "setup.sh")
    [pinned] = [args for args in setup if inference.name in {r.name for r in requirements(args)}]
    assert "--no-deps" in pinned, "onnx2torch asks for torchvision, which PyPI builds for CUDA torch"
    [wanted] = requirements(pinned)
    version = next(iter(wanted.specifier)).version
    assert inference.specifier.contains(version), f"{wanted} does not meet the inference extra's {inference}"
    if metadata.version(inference.name) != version:
        pytest.skip(f"onnx2torch {metadata.version(inference.name)} is installed here, the setup pins {version}")
    installed = {r.name for args in setup for r in requirements(args)}
    installed |= {Requirement(r).name for r in project["dependencies"]}
    needs = [Requirement(r) for r in metadata.requires(inference.name) or []]
    missing = [r.name for r in needs if not r.marker and r.name != "torchvision" and r.name not in installed]
    assert missing == [], f"--no-deps drops what onnx2torch needs: {missing}"
