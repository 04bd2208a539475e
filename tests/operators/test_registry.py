"""Registry files: validated with the file named, commands resolved, availability explained."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dlbench import CONF_DIR, PROJECT_ROOT
from dlbench.operators.registry import RegistryError, load_registry, resolve_command


def write_entry(directory: Path, name: str, body: str) -> Path:
    (directory / "registry").mkdir(parents=True, exist_ok=True)
    path = directory / "registry" / f"{name}.yaml"
    path.write_text(body)
    return path


def test_shipped_registry_serves_every_operator_on_torch() -> None:
    registry = load_registry([CONF_DIR])
    for op_type in (
        "Conv",
        "Gemm",
        "MatMul",
        "BatchNormalization",
        "Relu",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "Add",
        "Softmax",
        "LayerNormalization",
    ):
        (entry,) = registry.serving(op_type, backend="torch", device="cpu")
        assert entry.available, entry.unavailable_reason
    assert registry.operator("torch_conv").serves("torch_conv"), "the name counts as a synonym"


def test_misspelt_field_fails_naming_the_file(tmp_path: Path) -> None:
    path = write_entry(tmp_path, "bad", "name: bad\nsynonym: [Conv]\nexe: x\nparam_descr: [N]\n")
    with pytest.raises(RegistryError, match=rf"registry entry {path}: Key 'synonym' not in 'RegistryEntry'"):
        load_registry([tmp_path])


def test_missing_required_field_fails_naming_the_file(tmp_path: Path) -> None:
    path = write_entry(tmp_path, "bad", "name: bad\nexe: x\n")
    with pytest.raises(RegistryError, match=rf"{path}: .*param_descr"):
        load_registry([tmp_path])


def test_bad_permutation_fails_naming_the_file_and_field(tmp_path: Path) -> None:
    path = write_entry(tmp_path, "bad", "name: bad\nexe: x\nparam_descr: [M]\npermutation: ['ab -> az']\n")
    with pytest.raises(RegistryError, match=rf"{path}: field permutation"):
        load_registry([tmp_path])


def test_duplicate_names_are_rejected(tmp_path: Path) -> None:
    write_entry(tmp_path, "a", "name: same\nexe: x\nparam_descr: [M]\n")
    write_entry(tmp_path, "b", "name: same\nexe: y\nparam_descr: [M]\n")
    with pytest.raises(RegistryError, match="name 'same' is already used"):
        load_registry([tmp_path])


def test_first_config_dir_wins_for_the_same_file_name(tmp_path: Path) -> None:
    write_entry(tmp_path / "one", "x", "name: first\nexe: a\nparam_descr: [M]\n")
    write_entry(tmp_path / "two", "x", "name: second\nexe: b\nparam_descr: [M]\n")
    assert [e.name for e in load_registry([tmp_path / "one", tmp_path / "two"]).operators] == ["first"]


def test_commands_resolve_without_a_shell() -> None:
    assert resolve_command(["python", "-m", "x"], "w") == (sys.executable, "-m", "x")
    assert resolve_command("native/build/bin/onednn_conv", "w") == (str(PROJECT_ROOT / "native/build/bin/onednn_conv"),)
    # a string with spaces is one path, never split into a command line
    assert resolve_command("/opt/my bench; rm -rf x", "w") == ("/opt/my bench; rm -rf x",)
    assert resolve_command("tool.py", "w") == (sys.executable, str(PROJECT_ROOT / "tool.py"))
    with pytest.raises(RegistryError, match="exe must be a path or a non-empty list"):
        resolve_command([], "w")


def test_availability_names_the_path_it_looked_for(tmp_path: Path) -> None:
    write_entry(tmp_path, "ghost", f"name: ghost\nexe: {tmp_path}/nope\nparam_descr: [M]\n")
    not_exec = tmp_path / "plain.txt"
    not_exec.write_text("")
    write_entry(tmp_path, "plain", f"name: plain\nexe: {not_exec}\nparam_descr: [M]\n")
    write_entry(tmp_path, "mod", "name: mod\nexe: [python, -m, no_such_module_here]\nparam_descr: [M]\n")
    registry = load_registry([tmp_path])
    assert registry.operator("ghost").unavailable_reason == f"executable not found: {tmp_path}/nope"
    assert registry.operator("plain").unavailable_reason == f"not an executable file: {not_exec}"
    assert registry.operator("mod").unavailable_reason == "Python module no_such_module_here not found"


def _through_omegaconf(path: Path, schema: type, resolve: bool) -> object:
    from omegaconf import OmegaConf

    node = OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.load(path))
    return OmegaConf.to_object(node) if resolve else schema(**OmegaConf.to_container(node, resolve=False))


@pytest.mark.parametrize(("group", "resolve"), [("registry", True), ("training", False)])
def test_every_shipped_file_reads_the_same_straight_from_yaml_as_through_omegaconf(group: str, resolve: bool) -> None:
    from dlbench.config import RegistryEntry, TrainingEntry
    from dlbench.operators.registry import plain_entry

    schema = RegistryEntry if group == "registry" else TrainingEntry
    paths = sorted((CONF_DIR / group).glob("*.yaml"))
    assert paths
    for path in paths:
        plain = plain_entry(path, schema, resolve)
        assert plain is not None, f"{path} should not need OmegaConf"
        assert plain == _through_omegaconf(path, schema, resolve), path


@pytest.mark.parametrize(
    "body",
    [
        "name: n\nexe: x\nparam_descr: [M]\ndescription: 1.5\n",  # a number for a text field: coerced
        "name: n\nexe: x\nparam_descr: [M]\ndescription: ${oc.env:HOME}\n",  # an interpolation: resolved
        "name: n\nexe: x\nparam_descr: [M, 2.5]\n",  # a float: OmegaConf's YAML rules
    ],
)
def test_files_needing_omegaconfs_rules_still_get_them(tmp_path: Path, body: str) -> None:
    from dlbench.config import RegistryEntry
    from dlbench.operators.registry import load_yaml_node, plain_entry

    path = write_entry(tmp_path, "n", body)
    assert plain_entry(path, RegistryEntry, True) is None
    assert load_yaml_node(path, RegistryEntry, "registry") == _through_omegaconf(path, RegistryEntry, True)


def test_a_key_given_twice_fails_as_omegaconf_says(tmp_path: Path) -> None:
    path = write_entry(tmp_path, "twice", "name: a\nname: b\nexe: x\nparam_descr: [M]\n")
    with pytest.raises(RegistryError, match=rf"(?s)registry entry {path}: .*duplicate key name"):
        load_registry([tmp_path])
