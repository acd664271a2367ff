"""Settings → Presets (add, rename, delete, edit, make default) and the remote profile's budget switch."""

from __future__ import annotations

from app.core.settings.keystore import KeyStore
from app.core.settings.settings import BackendsConfig, EndpointProfile, Settings
from app.engine.machine.capability import HardwareProbe
from app.ui.dialogs.settings_dialog import SettingsDialog

CPU = HardwareProbe("cpu", "0.32.0", frozenset({"avx2"}))


def open_dialog(qtbot, settings: Settings) -> tuple[SettingsDialog, list[Settings]]:
    dialog = SettingsDialog(settings, CPU, keys=KeyStore())
    qtbot.addWidget(dialog)
    applied: list[Settings] = []
    dialog.applied.connect(applied.append)
    return dialog, applied


def test_presets_are_added_renamed_edited_made_default_and_deleted(qtbot) -> None:
    """Bugs caught: a preset's edits not reaching the saved settings, a renamed default losing its place, a
    value left "unset" saved as a number; two presets of one name accepted."""
    dialog, applied = open_dialog(qtbot, Settings())
    tab = dialog.presets_tab
    tab.list.setCurrentRow(1)  # Quick answer
    tab.add()
    assert tab.name.text() == "New preset 1" and tab.presets[-1]["think_budget"] == 512
    tab.name.setText("Terse")
    tab.name.textEdited.emit("Terse")
    tab.system_prompt.setPlainText("One line only.")
    tab.own["temperature"].setChecked(True)
    tab.editors["temperature"].setValue(0.2)  # type: ignore[attr-defined]
    tab.make_default()
    tab.list.setCurrentRow(0)
    tab.delete()  # Default goes
    dialog._on_apply()
    presets = applied[-1].presets
    assert [p.name for p in presets.presets] == ["Quick answer", "Careful proof", "Terse"]
    terse = presets.preset("Terse")
    assert terse is not None and presets.default == "Terse"
    assert (terse.system_prompt, terse.temperature, terse.think_budget, terse.top_p) == ("One line only.", 0.2,
                                                                                          512, None)
    tab.list.setCurrentRow(2)
    tab.name.setText("Quick answer")
    tab.name.textEdited.emit("Quick answer")
    assert "same name" in tab.problem.text() and not dialog.buttons.button(dialog.buttons.StandardButton.Ok)\
        .isEnabled(), "two presets of one name are refused in the tab"


def test_a_remote_profile_sends_the_budget_only_when_its_switch_is_on(qtbot) -> None:
    """Bug caught: the profile's switch lost when another field of the profile is edited, or not saved."""
    settings = Settings(backends=BackendsConfig(profiles=(EndpointProfile(name="box", base_url="http://h/v1"),)))
    dialog, applied = open_dialog(qtbot, settings)
    panel = dialog.backends_panel
    assert not panel.send_budget.isChecked()
    panel.send_budget.click()
    panel.model_edit.setText("served-model")
    panel.model_edit.textEdited.emit("served-model")
    dialog._on_apply()
    [profile] = applied[-1].backends.profiles
    assert profile.send_think_budget and profile.model == "served-model"
