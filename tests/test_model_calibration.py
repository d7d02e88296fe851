"""The calibration document: the committed one fits the H200 only; a fitted one changes the constants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddbench.errors import InputError
from ddbench.gpus import GPUS, RTX_PRO_6000
from ddbench.model.calibration import (
    FITTED,
    UNCALIBRATED,
    UNCALIBRATED_LABEL,
    Calibration,
    CaseError,
    calibration_for,
    with_what_if,
)

COMMITTED = Path(__file__).resolve().parents[1] / "ddbench" / "model" / "calibration.json"


def test_the_committed_calibration_is_the_h200s_measured_one_and_no_other_gpus():
    doc = json.loads(COMMITTED.read_text())
    for key in GPUS:
        cal = calibration_for(doc, key, str(COMMITTED))
        if key != "h200":
            assert cal is UNCALIBRATED and cal.label == UNCALIBRATED_LABEL
            assert "uncalibrated" in cal.error_band
    h200 = calibration_for(doc, "h200", str(COMMITTED))
    assert h200.label.startswith("measured on NVIDIA H200") and len(h200.errors) == 13
    assert h200.error_band.endswith("over 13 measured cases")
    assert set(h200.constants) <= {*FITTED, "triton_time_scale"} and h200.constants["triton_time_scale"] > 1


def _doc(entry):
    return {"format_version": 1, "gpus": {"rtx-pro-6000": entry}}


def test_fitted_constants_and_measured_errors():
    cal = calibration_for(
        _doc(
            {
                "label": "fitted 2026-12-01 on an RTX PRO 6000",
                "constants": {"dram_gbs": 1650.0, "sms": 188.0},
                "errors": [
                    {"case": "a", "measured_us": 10.0, "modeled_us": 12.0},
                    {"case": "b", "measured_us": 20.0, "modeled_us": 18.0},
                ],
            }
        ),
        "rtx-pro-6000",
        "cal.json",
    )
    gpu = cal.apply(RTX_PRO_6000)
    assert gpu.dram_gbs == 1650.0 and gpu.sms == 188 and isinstance(gpu.sms, int)
    assert cal.error_band == "-10% .. +20% over 2 measured cases"


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({"gpus": {}}, "format_version"),
        (_doc({"constants": {}}), "gpus.rtx-pro-6000"),
        (_doc({"label": "x", "constants": {"warp_speed": 9}}), "unknown constants"),
        (_doc({"label": "x", "constants": {"dram_gbs": -1}}), "gpus.rtx-pro-6000.constants.dram_gbs"),
        (_doc({"label": "x", "errors": [{"case": "a", "measured_us": 0, "modeled_us": 1}]}), "measured_us"),
        # Infinity passed `> 0`; 0.5 SMs became 0 and divided the model by zero; a number is not a list
        (_doc({"label": "x", "constants": {"sms": float("inf")}}), "constants.sms: is inf, not a finite"),
        (_doc({"label": "x", "constants": {"sms": 0.5}}), "constants.sms: is 0.5; sms counts"),
        (_doc({"label": "x", "errors": 3}), "gpus.rtx-pro-6000.errors: must be a list"),
        ({"format_version": True, "gpus": {}}, "format_version"),
    ],
)
def test_a_bad_calibration_names_the_file_and_field(doc, where):
    with pytest.raises(InputError) as err:
        calibration_for(doc, "rtx-pro-6000", "cal.json")
    assert err.value.message.startswith("cal.json") and where in err.value.message


def test_a_what_if_sets_constants_by_hand_and_says_it_is_no_measurement():
    fitted = Calibration("measured on a test GPU", {"l2_gbs": 4000.0}, (CaseError("c", 10.0, 11.0),))
    asked = with_what_if(fitted, ["issue_per_clk=1.5", "sms=100.0"])
    assert asked.constants == {"l2_gbs": 4000.0, "issue_per_clk": 1.5, "sms": 100}
    assert isinstance(asked.constants["sms"], int)
    assert asked.label == "measured on a test GPU; what-if issue_per_clk=1.5, sms=100 (not measured)"
    assert (
        asked.errors == () and asked.error_band == "not measured"
    )  # the fit's errors were of other constants
    assert asked.apply(RTX_PRO_6000).issue_per_clk == 1.5
    assert with_what_if(fitted, []) is fitted


@pytest.mark.parametrize(
    ("assignment", "reason"),
    [
        ("issue=1", "NAME one of"),
        ("key=1", "NAME one of"),  # not a number of the table
        ("issue_per_clk", "NAME one of"),
        ("issue_per_clk=fast", "not a positive number"),
        ("issue_per_clk=0", "not a positive number"),
        ("issue_per_clk=nan", "not a positive number"),
        ("issue_per_clk=inf", "not a positive number"),
        ("sms=0.5", "sms counts, so it must be a whole number"),  # was int(0.5) = 0 SMs: ZeroDivisionError
    ],
)
def test_a_bad_what_if_names_the_option_and_the_reason(assignment, reason):
    with pytest.raises(InputError, match=reason) as err:
        with_what_if(UNCALIBRATED, [assignment])
    assert err.value.message.startswith("--what-if: ")
