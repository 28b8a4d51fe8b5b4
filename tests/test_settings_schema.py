"""The lab settings (schema/plugin.json) and the kernel's validators agree: every gradient
threshold a user can set in the Settings Editor is accepted by the kernel, with the same
bounds, and nothing the kernel would refuse passes the settings schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from jupyterlab_torchdbg.kernel.action_args import bounds
from jupyterlab_torchdbg.kernel.action_registry import ActionError
from jupyterlab_torchdbg.kernel.grads.action_args import (
    THRESHOLD_NAMES,
    validate_stride,
    validate_thresholds,
)

SETTINGS = json.loads((Path(__file__).parents[1] / "schema" / "plugin.json").read_text())
THRESHOLDS = SETTINGS["properties"]["gradientThresholds"]


def test_every_kernel_threshold_is_a_setting_with_the_same_bounds() -> None:
    props = THRESHOLDS["properties"]
    assert set(props) == set(THRESHOLD_NAMES)
    for key in THRESHOLD_NAMES:
        b = bounds("set_thresholds", key)
        lo, hi, exclusive, integer = b.minimum, b.maximum, b.exclusive_minimum, b.integer
        p = props[key]
        types = p["type"] if isinstance(p["type"], list) else [p["type"]]
        assert ("integer" in types) == integer, key
        assert p["maximum"] == hi, key
        if exclusive:
            assert p["exclusiveMinimum"] == lo and "minimum" not in p, key
        else:
            assert p["minimum"] == lo and "exclusiveMinimum" not in p, key


@pytest.mark.parametrize("key", sorted(THRESHOLD_NAMES))
def test_settings_schema_and_kernel_accept_and_refuse_the_same_values(key: str) -> None:
    b = bounds("set_thresholds", key)
    lo, hi, exclusive, integer = b.minimum, b.maximum, b.exclusive_minimum, b.integer
    assert lo is not None and hi is not None
    inside = hi if not integer else int(hi)
    outside = [hi * 10, lo if exclusive else lo - 1]
    settings = jsonschema.Draft7Validator(THRESHOLDS)
    assert settings.is_valid({key: inside})
    assert validate_thresholds({key: inside}) == {key: inside}
    for bad in outside:
        assert not settings.is_valid({key: bad}), (key, bad)
        with pytest.raises(ActionError):
            validate_thresholds({key: bad})


def test_sampling_setting_values_are_strides_the_kernel_accepts() -> None:
    sampling = SETTINGS["properties"]["gradientSampling"]
    assert sampling["default"] == "auto"
    # what src/plugins/gradSettings.ts sends for each choice
    sent = {"auto": "auto", "every step": 1, "off": "off"}
    assert set(sampling["enum"]) == set(sent)
    assert [validate_stride({"stride": v})["mode"] for v in sent.values()] == [
        "auto",
        "fixed",
        "off",
    ]
