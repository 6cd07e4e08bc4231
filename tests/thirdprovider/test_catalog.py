"""The catalog's one way in: Lumen's entry point puts it beside the built-in providers,
and a registration that breaks the rules is refused with a reason."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bot.local.demo.stack import DEMO_POLICY
from bot.providers import catalog, installed
from bot.providers.descriptor import ProviderDescriptor
from tests.support.process_kit import base_env, run_gpuops
from tests.thirdprovider.descriptor import DESCRIPTOR


def test_the_entry_point_group_adds_lumen_beside_the_built_ins(lumen_registered: Path) -> None:
    loaded = installed.load_catalog()
    assert loaded.names == ("together", "e2e", "lumen")
    assert loaded.descriptor("lumen") is DESCRIPTOR
    assert loaded.by_verb("resize") is DESCRIPTOR
    assert loaded.provider_changes()["lumen"].actions == ("resize",)


def test_without_the_distribution_lumen_is_unknown() -> None:
    loaded = installed.load_catalog()
    assert loaded.names == ("together", "e2e")
    with pytest.raises(KeyError, match="unknown provider 'lumen' \\(known: together, e2e\\)"):
        loaded.descriptor("lumen")


@pytest.mark.parametrize(
    ("clash", "says"),
    [
        (replace(DESCRIPTOR, name="together"), "two providers are named together"),
        (
            replace(DESCRIPTOR, changes=DESCRIPTOR.changes.model_copy(update={"command": "list"})),
            "the word `list` is gpuops's",
        ),
        (
            replace(
                DESCRIPTOR, changes=DESCRIPTOR.changes.model_copy(update={"command": "update"})
            ),
            "the word `update` is together's",
        ),
    ],
)
def test_a_name_or_verb_already_taken_is_refused(clash: ProviderDescriptor, says: str) -> None:
    with pytest.raises(catalog.CatalogError, match=says):
        catalog.check([*installed.BUILT_IN, clash])


def test_an_entry_point_that_is_not_a_descriptor_is_refused(
    lumen_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry_points = next(lumen_site.glob("*.dist-info")) / "entry_points.txt"
    entry_points.write_text("[gpuops.providers]\nlumen = tests.thirdprovider.descriptor:size\n")
    monkeypatch.syspath_prepend(str(lumen_site))
    with pytest.raises(catalog.CatalogError, match="is not a ProviderDescriptor"):
        installed.registered()


def test_a_built_in_registered_through_the_group_as_well_is_listed_once() -> None:
    assert catalog.check([*installed.BUILT_IN, *installed.BUILT_IN]) == installed.BUILT_IN


def _broken_site(tmp_path: Path) -> Path:
    """A distribution registering a provider whose module is not installed."""
    site = tmp_path / "broken-site"
    info = site / "gpuops_broken-0.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gpuops-broken\nVersion: 0.2\n")
    (info / "entry_points.txt").write_text(
        "[gpuops.providers]\nbroken = gpuops_broken_missing.descriptor:DESCRIPTOR\n"
    )
    return site


BROKEN_SAYS = (
    "entry point broken = gpuops_broken_missing.descriptor:DESCRIPTOR (gpuops.providers, "
    "from gpuops-broken 0.2) could not be loaded (ModuleNotFoundError: No module named "
    "'gpuops_broken_missing'); fix or uninstall that package"
)


def test_an_entry_point_that_cannot_be_loaded_is_named_with_its_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(_broken_site(tmp_path)))
    with pytest.raises(catalog.CatalogError) as refused:
        installed.registered()
    assert str(refused.value) == BROKEN_SAYS


@pytest.mark.parametrize(
    "args", [["check-config"], ["serve", "--port", "0"], ["audit", "verify"]], ids=" ".join
)
async def test_every_command_refuses_a_broken_provider_package_in_one_line(
    tmp_path: Path, args: list[str]
) -> None:
    policy = tmp_path / "policy.yml"
    policy.write_text(DEMO_POLICY)
    env = base_env(tmp_path, policy, PYTHONPATH=str(_broken_site(tmp_path)))
    done = await run_gpuops(args, env, tmp_path)
    assert done.code == 1, done.stdout + done.stderr
    assert done.stderr == f"gpuops: {BROKEN_SAYS}\n"
    assert done.stdout == ""
