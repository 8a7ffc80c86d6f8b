"""Golden tests: our renderer reproduces upstream MedVision's question texts character for character.

Upstream sources (YongchengYAO/MedVision; spec: docs/spec/image-and-prompts.md, part 2):
  M  = src/medvision_bm/medvision_lmms-eval/lmms_eval/tasks/medvision/medvision_utils.py, master @c221615
  N  = src/medvision_bm/medvision_lmms_eval/lmms_eval/tasks/medvision/medvision_utils.py @0a4c5e2
  E  = the same file @e3cf881 (release v1.1.1, change 742c484): the pixel-size line takes ``_spatial_unit(unit)``,
       "millimeters" for an angle task ("degrees" under N); every other sentence as N
  NP = src/medvision_bm/sft/sft_prompts.py @f1102c5

The expected strings are typed out here from upstream's rules (not produced by the code under test). Lines that end
with a space in upstream (the CoT instructions end with "tags. ") keep it: see the explicit " \\n" below.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from medvision_bm.tasks.upstream_prompts import (
    PROMPT_VERSIONS,
    RESOLUTION_VARIANTS,
    VARIANTS,
    PromptInput,
    build_prompt,
    prompt_version,
    scaled_ps_factors,
    template_fingerprint,
)

# --------------------------------------------------------------------------------------------------------------
# Literal upstream constants (NP @f1102c5 unless marked M)
# --------------------------------------------------------------------------------------------------------------
M_FORMAT_BOX = (
    "The answer should be four decimal numbers separated by commas without any units or additional text. The first "
    "two numbers are the coordinates of the lower-left corner and the last two numbers are the coordinates of the "
    "upper-right corner of the bounding box. Use relative coordinates in the image space, where the origin is at the "
    "lower-left corner of the image. Relative coordinates should be values between 0 and 1, representing the "
    "relative positions in the image."
)
M_FORMAT_TL = ("The answer should be two decimal numbers separated by a comma without any units or additional text. "
               "The first is the major axis length, and the second is the minor axis length.")
M_FORMAT_AD = "The answer should be a single decimal number without any units or additional text."

GENERAL = ("The reasoning process and the final answer must be enclosed within <think> </think> and <answer> "
           "</answer> tags, respectively. For example: <think> reasoning process here </think> <answer> answer here "
           "</answer>. ")
N_FORMAT_BOX = GENERAL + M_FORMAT_BOX
N_FORMAT_TL = (GENERAL + "The answer should be two decimal numbers separated by a comma. The first is the major "
               "axis length, and the second is the minor axis length.")
N_FORMAT_AD = GENERAL + "The answer should be a single decimal number."
TL_REASONING = ("The final answer must be enclosed within <answer> </answer> tags. The answer should consist of two "
                "decimal numbers separated by a comma, without units or extra text. The first number is the major "
                "axis length, and the second is the minor axis length.")
AD_REASONING = ("The final answer must be enclosed within <answer> </answer> tags. The answer should be a single "
                "decimal number without units or extra text.")
COT_TAIL = ("Report the reasoning process and final answer within <think> </think> and <answer> </answer> tags, "
            "respectively. Inside <think> </think>, include reasoning and step results using <step-k-reasoning> "
            "</step-k-reasoning> and <step-k-answer> </step-k-answer> tags. ")
COT_DETECT = ("Step 1: Identify the relative coordinates of the bounding box. The relative coordinates must be "
              "written as (x, y), where x is the relative position in width and y is the relative position in "
              "height. " + COT_TAIL)
COT_TL = (
    "Step 1: Identify the major axis (the longest diameter) of the ellipse enclosing the target region. Find its two "
    "endpoints and record their relative coordinates in the format (x, y) = (relative position in width direction, "
    "relative position in height direction). Denote the endpoints as (x1_major, y1_major) and (x2_major, y2_major). "
    "Step 2: Identify the minor axis (the shortest diameter) of the ellipse. Find its two endpoints and record their "
    "relative coordinates in the same (x, y) format. Denote them as (x1_minor, y1_minor) and (x2_minor, y2_minor). "
    "Step 3: Given the pixel dimensions (pixel_width, pixel_height) and image size (image_width, image_height), "
    "compute the physical length of the major axis using: major_axis_length = sqrt(((x2_major - x1_major) * "
    "image_width * pixel_width)^2 + ((y2_major - y1_major) * image_height * pixel_height)^2). Step 4: Similarly, "
    "compute the physical length of the minor axis using: minor_axis_length = sqrt(((x2_minor - x1_minor) * "
    "image_width * pixel_width)^2 + ((y2_minor - y1_minor) * image_height * pixel_height)^2). " + COT_TAIL
)
COT_DISTANCE = (
    "Step 1: Identify the landmark 1 and record its relative coordinates in the format (x, y) = (relative position "
    "in width direction, relative position in height direction). Denote the coordinates as (x1, y1). Step 2: "
    "Identify the landmark 2 and record its relative coordinates in the same (x, y) format. Denote the coordinates "
    "as (x2, y2). Step 3: Given the pixel dimensions (pixel_width, pixel_height) and image size (image_width, "
    "image_height), compute the physical distance between the two landmarks using: distance = sqrt(((x2 - x1) * "
    "image_width * pixel_width)^2 + ((y2 - y1) * image_height * pixel_height)^2). " + COT_TAIL
)
COT_ANGLE = (
    "Step 1: Identify line 1 and record the relative coordinates of its two endpoints in the format (x, y) = "
    "(relative position in width direction, relative position in height direction). Denote the endpoints as "
    "(x1_line1, y1_line1) and (x2_line1, y2_line1). Step 2: Identify line 2 and record the relative coordinates of "
    "its two endpoints in the same (x, y) format. Denote them as (x1_line2, y1_line2) and (x2_line2, y2_line2). "
    "Step 3: Given the pixel dimensions (pixel_width, pixel_height) and image size (image_width, image_height), "
    "compute the angle between the two lines using the formula: angle = arccos(|A \u00b7 B| / (||A|| ||B||)), where A "
    "and B are the vectors of the two lines computed from the physical coordinates of their endpoints. A = "
    "((x2_line1 - x1_line1) * image_width * pixel_width, (y2_line1 - y1_line1) * image_height * pixel_height) and "
    "B = ((x2_line2 - x1_line2) * image_width * pixel_width, (y2_line2 - y1_line2) * image_height * pixel_height). "
    "Denote A=(Ax, Ay) and B=(Bx, By). Then, angle = arccos(|Ax*Bx + Ay*By| / (sqrt(Ax^2 + Ay^2) * sqrt(Bx^2 + "
    "By^2))). " + COT_TAIL
)
FOLLOW = "Follow the reasoning steps to get the final answer in the required format."

# --------------------------------------------------------------------------------------------------------------
# Inputs (dataset-module strings: docs/spec/data-loader.md section 9; geometry invented, MedGemma 896x896 canvas)
# --------------------------------------------------------------------------------------------------------------
CT = "abdominal computed tomography (CT) scan"
DETECT = PromptInput("detect", "Box-Size", CT, label_name="kidney tumor")
TL = PromptInput("TL", "Tumor-Lesion-Size", CT, label_name="kidney tumor", metric_unit=["mm"], canvas_hw=(896, 896),
                 pixel_hw_mm=(0.46857142857142857, 0.33035714285714285))
DIST = PromptInput("AD", "Biometrics-From-Landmarks", "", metric_type="distance", metric_unit="mm",
                   biometrics_name="length of corpus callosum",
                   points=("most anterior point of corpus callosum", "most posterior point of corpus callosum"),
                   canvas_hw=(896, 896), pixel_hw_mm=(0.22857142857142856, 0.16071428571428573))
ANGLE = PromptInput("AD", "Biometrics-From-Landmarks-Angle", "cephalogram (head and neck X-ray)",
                    metric_type="angle", metric_unit="degree", biometrics_name="",
                    points=("nasion", "subspinale", "nasion", "supramentale"), canvas_hw=(896, 896),
                    pixel_hw_mm=(0.2159598214285714, 0.26785714285714285))


def _with(inp: PromptInput, **kw) -> PromptInput:
    return PromptInput(**{**inp.__dict__, **kw})


# --------------------------------------------------------------------------------------------------------------
# Paper protocol (M @c221615)
# --------------------------------------------------------------------------------------------------------------


def test_paper_detect():
    """M create_doc_to_text_BoxCoordinate @c221615: singular "corner", no pixel size, no think/answer tags."""
    expected = (
        "Task:\n"
        "Given the input medical image: abdominal computed tomography (CT) scan, return the coordinates of the "
        "lower-left and upper-right corner of the bounding box for the kidney tumor.\n"
        "Format requirement:\n"
        "The answer should be four decimal numbers separated by commas without any units or additional text. The "
        "first two numbers are the coordinates of the lower-left corner and the last two numbers are the coordinates "
        "of the upper-right corner of the bounding box. Use relative coordinates in the image space, where the "
        "origin is at the lower-left corner of the image. Relative coordinates should be values between 0 and 1, "
        "representing the relative positions in the image."
    )
    assert build_prompt(DETECT, "", "paper") == expected


def test_paper_tl_raw_mm_from_list_unit():
    """M create_doc_to_text_TumorLesionSize @c221615: a list metric_unit (T/L docs: ["mm"]) is used unmapped, so the
    text says "in mm." and the pixel line "mm"; no image-size line."""
    expected = (
        "Task:\n"
        "Given the input medical image: abdominal computed tomography (CT) scan, estimate the major and minor axis "
        "lengths of the ellipse enclosing the kidney tumor, in mm.\n"
        "Additional information:\n"
        "The pixel size for this image is 0.330 mm (width) x 0.469 mm (height).\n"
        "Format requirement:\n"
        "The answer should be two decimal numbers separated by a comma without any units or additional text. The "
        "first is the major axis length, and the second is the minor axis length."
    )
    assert build_prompt(TL, "", "paper") == expected


def test_paper_tl_string_unit_is_mapped():
    """M create_doc_to_text_TumorLesionSize @c221615: a plain string "mm"/"cm" is mapped to the long form; any other
    string stays as it is."""
    mm = build_prompt(_with(TL, metric_unit="mm"), "", "paper")
    assert ", in millimeters.\n" in mm
    assert "0.330 millimeters (width) x 0.469 millimeters (height)." in mm
    assert ", in centimeters.\n" in build_prompt(_with(TL, metric_unit="cm"), "", "paper")
    assert ", in inch.\n" in build_prompt(_with(TL, metric_unit="inch"), "", "paper")


def test_paper_distance_empty_description_and_mm_pixel_line():
    """M create_doc_to_text_BiometricsFromLandmarks / _get_biometric_prompt_distance @c221615: an empty description
    renders "image: , "; the unit "mm" becomes "millimeters" in the task sentence, the pixel line says "mm"."""
    expected = (
        "Task:\n"
        "Given the input medical image: , estimate the distance of length of corpus callosum in millimeters, which "
        "is the distance between 2 landmark points: (landmark 1) most anterior point of corpus callosum, (landmark 2) "
        "most posterior point of corpus callosum.\n"
        "Additional information:\n"
        "The pixel size for this image is 0.161 mm (width) x 0.229 mm (height).\n"
        "Format requirement:\n"
        "The answer should be a single decimal number without any units or additional text."
    )
    assert build_prompt(DIST, "", "paper") == expected


def test_paper_angle_degree_and_no_name_wording():
    """M _get_biometric_prompt_angle @c221615: an empty name uses "estimate the angle between 2 lines in ...";
    the unit is the raw "degree"; the pixel line still says "mm"."""
    expected = (
        "Task:\n"
        "Given the input medical image: cephalogram (head and neck X-ray), estimate the angle between 2 lines in "
        "degree: (line 1) the line connecting nasion and subspinale, (line 2) the line connecting nasion and "
        "supramentale.\n"
        "Additional information:\n"
        "The pixel size for this image is 0.268 mm (width) x 0.216 mm (height).\n"
        "Format requirement:\n"
        "The answer should be a single decimal number without any units or additional text."
    )
    assert build_prompt(ANGLE, "", "paper") == expected


def test_paper_named_angle_and_unnamed_distance():
    """M _get_biometric_prompt_angle/_distance @c221615: the named angle and the unnamed distance wordings."""
    named = build_prompt(_with(ANGLE, biometrics_name="SNA"), "", "paper")
    assert ("estimate the angle of SNA in degree, which is the angle between 2 lines: (line 1) the line connecting "
            "nasion and subspinale, (line 2) the line connecting nasion and supramentale.\n") in named
    unnamed = build_prompt(_with(DIST, biometrics_name=None, metric_unit=" mm "), "", "paper")
    assert ("Given the input medical image: , estimate the distance between 2 landmark points in millimeters: "
            "(landmark 1) most anterior point of corpus callosum, (landmark 2) most posterior point of corpus "
            "callosum.\n") in unnamed


@pytest.mark.parametrize("suffix", RESOLUTION_VARIANTS)
@pytest.mark.parametrize("protocol", ["paper", "current"])
def test_resolution_suffix_renders_plain_text(suffix, protocol):
    """M/N YAMLs *-336x336/-560x560/-896x896 bind the plain doc_to_text (only the image is reshaped)."""
    for inp in (DETECT, TL, DIST, ANGLE):
        assert build_prompt(inp, suffix, protocol) == build_prompt(inp, "", protocol)


@pytest.mark.parametrize("variant", ["-CoT", "-CoT-woInstruct", "-CoT-scaledPS", "-VP", "-VP-woMedImg"])
def test_paper_has_plain_texts_only(variant):
    """M @c221615 defines only the plain doc_to_text functions used by the task YAMLs."""
    with pytest.raises(ValueError, match="paper"):
        build_prompt(TL, variant, "paper")


# --------------------------------------------------------------------------------------------------------------
# Current protocol: detection (N @0a4c5e2, NP @f1102c5)
# --------------------------------------------------------------------------------------------------------------


def test_current_detect_plain():
    """N create_doc_to_text_BoxCoordinate @0a4c5e2: plural "corners"; NP FORMAT_PROMPT_BOX_COORDINATES starts with
    GENERAL_FORMAT_PROMPT."""
    expected = (
        "Task:\n"
        "Given the input medical image: abdominal computed tomography (CT) scan, return the coordinates of the "
        "lower-left and upper-right corners of the bounding box for the kidney tumor.\n"
        "Format requirement:\n"
        "The reasoning process and the final answer must be enclosed within <think> </think> and <answer> </answer> "
        "tags, respectively. For example: <think> reasoning process here </think> <answer> answer here </answer>. "
        "The answer should be four decimal numbers separated by commas without any units or additional text. The "
        "first two numbers are the coordinates of the lower-left corner and the last two numbers are the coordinates "
        "of the upper-right corner of the bounding box. Use relative coordinates in the image space, where the "
        "origin is at the lower-left corner of the image. Relative coordinates should be values between 0 and 1, "
        "representing the relative positions in the image."
    )
    assert build_prompt(DETECT, "", "current") == expected


def test_current_detect_cot():
    """N create_doc_to_text_BoxCoordinate_CoT @0a4c5e2 with NP COT_INSTRUCT_DETECTION (ends with "tags. ")."""
    expected = (
        "Task:\n"
        "Given the input medical image: abdominal computed tomography (CT) scan, return the coordinates of the "
        "lower-left and upper-right corners of the bounding box for the kidney tumor.\n"
        "Format requirement:\n" + N_FORMAT_BOX + "\n"
        "Reasoning steps:\n"
        "Step 1: Identify the relative coordinates of the bounding box. The relative coordinates must be written as "
        "(x, y), where x is the relative position in width and y is the relative position in height. Report the "
        "reasoning process and final answer within <think> </think> and <answer> </answer> tags, respectively. "
        "Inside <think> </think>, include reasoning and step results using <step-k-reasoning> </step-k-reasoning> "
        "and <step-k-answer> </step-k-answer> tags. \n"
        "Follow the reasoning steps to get the final answer in the required format."
    )
    assert build_prompt(DETECT, "-CoT", "current") == expected


def test_current_detect_empty_description_drops_colon():
    """N create_doc_to_text_BoxCoordinate @0a4c5e2: image_prompt is "" when the description is "" or None."""
    for desc in ("", None):
        text = build_prompt(_with(DETECT, image_description=desc), "", "current")
        assert text.startswith("Task:\nGiven the input medical image, return the coordinates of the lower-left")


def test_current_detect_vp_and_wo_med_img():
    """N create_doc_to_text_BoxCoordinate_wBox and doc_to_text_BoxCoordinate_wBox_woMedImg @0a4c5e2."""
    assert build_prompt(DETECT, "-VP", "current") == (
        "Task:\n"
        "Given the input medical image: abdominal computed tomography (CT) scan, and the highlighted bounding box "
        "enclosing the kidney tumor, return the coordinates of the lower-left and upper-right corners of the "
        "bounding box.\n"
        "Format requirement:\n" + N_FORMAT_BOX
    )
    assert build_prompt(DETECT, "-VP-woMedImg", "current") == (
        "Task:\n"
        "Return the coordinates of the lower-left and upper-right corners of the highlighted bounding box in the "
        "image.\n"
        "Format requirement:\n" + N_FORMAT_BOX
    )


@pytest.mark.parametrize("variant", ["-CoT-woInstruct", "-CoT-scaledPS"])
def test_current_detect_has_no_such_variant(variant):
    """N @0a4c5e2 defines no detection woInstruct or scaledPS doc_to_text."""
    with pytest.raises(ValueError, match="no detect text"):
        build_prompt(DETECT, variant, "current")


# --------------------------------------------------------------------------------------------------------------
# Current protocol: T/L
# --------------------------------------------------------------------------------------------------------------

TL_HEAD = (
    "Task:\n"
    "Given the input medical image: abdominal computed tomography (CT) scan, estimate the major and minor axis "
    "lengths of the ellipse enclosing the kidney tumor, in millimeters.\n"
    "Additional information:\n"
    "The image size is 896 pixels (width) x 896 pixels (height).\n"
    "The pixel size for this image is 0.330 millimeters (width) x 0.469 millimeters (height).\n"
    "Format requirement:\n"
)


def test_current_tl_plain():
    """N create_doc_to_text_TumorLesionSize @0a4c5e2: "millimeters" (from ["mm"]), image-size line, NP
    FORMAT_PROMPT_TUMOR_LESION_SIZE without "without any units"."""
    expected = (
        "Task:\n"
        "Given the input medical image: abdominal computed tomography (CT) scan, estimate the major and minor axis "
        "lengths of the ellipse enclosing the kidney tumor, in millimeters.\n"
        "Additional information:\n"
        "The image size is 896 pixels (width) x 896 pixels (height).\n"
        "The pixel size for this image is 0.330 millimeters (width) x 0.469 millimeters (height).\n"
        "Format requirement:\n"
        "The reasoning process and the final answer must be enclosed within <think> </think> and <answer> </answer> "
        "tags, respectively. For example: <think> reasoning process here </think> <answer> answer here </answer>. "
        "The answer should be two decimal numbers separated by a comma. The first is the major axis length, and the "
        "second is the minor axis length."
    )
    assert build_prompt(TL, "", "current") == expected


def test_current_tl_cot():
    """N create_doc_to_text_TumorLesionSize_CoT @0a4c5e2: NP FORMAT_PROMPT_TL_REASONING + COT_INSTRUCT_TL_NORM."""
    expected = (
        TL_HEAD
        + "The final answer must be enclosed within <answer> </answer> tags. The answer should consist of two decimal "
        "numbers separated by a comma, without units or extra text. The first number is the major axis length, and "
        "the second is the minor axis length.\n"
        "Reasoning steps:\n" + COT_TL + "\n" + FOLLOW
    )
    assert build_prompt(TL, "-CoT", "current") == expected
    assert expected.count(" \nFollow the reasoning steps") == 1


def test_current_tl_cot_wo_instruct_ends_with_newline():
    """N create_doc_to_text_TumorLesionSize_CoT_woInstruct @0a4c5e2: stops after FORMAT_PROMPT_TL_REASONING + "\\n"."""
    assert build_prompt(TL, "-CoT-woInstruct", "current") == TL_HEAD + TL_REASONING + "\n"


def test_current_tl_cot_scaled_ps():
    """N create_doc_to_text_TumorLesionSize_CoT_scaledPS @0a4c5e2: both pixel sizes times one factor S."""
    s = 1.642010664579162
    inp = _with(TL, scale_hw=(s, s))
    expected = TL_HEAD.replace("0.330 millimeters (width) x 0.469 millimeters (height)",
                               "0.542 millimeters (width) x 0.769 millimeters (height)")
    expected += TL_REASONING + "\nReasoning steps:\n" + COT_TL + "\n" + FOLLOW
    assert build_prompt(inp, "-CoT-scaledPS", "current") == expected


def test_current_tl_vp_and_wo_med_img():
    """N create_doc_to_text_TumorLesionSize_wVisualPrompt and doc_to_text_TumorLesionSize_wVisualPrompt_woMedImg
    @0a4c5e2."""
    info = (
        "Additional information:\n"
        "The image size is 896 pixels (width) x 896 pixels (height).\n"
        "The pixel size for this image is 0.330 millimeters (width) x 0.469 millimeters (height).\n"
        "Format requirement:\n"
    )
    assert build_prompt(TL, "-VP", "current") == (
        "Task:\n"
        "Given the input medical image: abdominal computed tomography (CT) scan, and the two lines indicating the "
        "major and minor axes of the ellipse enclosing the kidney tumor, estimate the major and minor axis lengths in "
        "millimeters.\n" + info + N_FORMAT_TL
    )
    assert build_prompt(TL, "-VP-woMedImg", "current") == (
        "Task:\n"
        "Given the two lines indicating the major and minor axes of the ellipse enclosing the highlighted region, "
        "estimate the major and minor axis lengths in millimeters.\n" + info + N_FORMAT_TL
    )


# --------------------------------------------------------------------------------------------------------------
# Current protocol: A/D
# --------------------------------------------------------------------------------------------------------------

DIST_HEAD = (
    "Task:\n"
    "Given the input medical image, estimate the distance of length of corpus callosum in millimeters, which is the "
    "distance between 2 landmark points: (landmark 1) most anterior point of corpus callosum, (landmark 2) most "
    "posterior point of corpus callosum.\n"
    "Additional information:\n"
    "The image size is 896 pixels (width) x 896 pixels (height).\n"
    "The pixel size for this image is 0.161 millimeters (width) x 0.229 millimeters (height).\n"
    "Format requirement:\n"
)
ANGLE_HEAD = (
    "Task:\n"
    "Given the input medical image: cephalogram (head and neck X-ray), estimate the angle between 2 lines in degrees: "
    "(line 1) the line connecting nasion and subspinale, (line 2) the line connecting nasion and supramentale.\n"
    "Additional information:\n"
    "The image size is 896 pixels (width) x 896 pixels (height).\n"
    "The pixel size for this image is 0.268 millimeters (width) x 0.216 millimeters (height).\n"
    "Format requirement:\n"
)


def test_current_distance_plain():
    """N create_doc_to_text_BiometricsFromLandmarks @0a4c5e2: no ": " for an empty description, NP
    FORMAT_PROMPT_BIOMETRICS."""
    expected = (
        "Task:\n"
        "Given the input medical image, estimate the distance of length of corpus callosum in millimeters, which is "
        "the distance between 2 landmark points: (landmark 1) most anterior point of corpus callosum, (landmark 2) "
        "most posterior point of corpus callosum.\n"
        "Additional information:\n"
        "The image size is 896 pixels (width) x 896 pixels (height).\n"
        "The pixel size for this image is 0.161 millimeters (width) x 0.229 millimeters (height).\n"
        "Format requirement:\n"
        "The reasoning process and the final answer must be enclosed within <think> </think> and <answer> </answer> "
        "tags, respectively. For example: <think> reasoning process here </think> <answer> answer here </answer>. "
        "The answer should be a single decimal number."
    )
    assert build_prompt(DIST, "", "current") == expected


def test_current_angle_plain_millimeters_pixel_line():
    """N _normalize_metric_unit @0a4c5e2: "degree" -> "degrees" in the task sentence; E _spatial_unit @e3cf881: the
    pixel line of an angle says "millimeters" (N said "degrees" there)."""
    assert build_prompt(ANGLE, "", "current") == ANGLE_HEAD + N_FORMAT_AD
    assert "in degrees: (line 1)" in ANGLE_HEAD and "degrees (width)" not in ANGLE_HEAD


def test_current_distance_cot():
    """N create_doc_to_text_BiometricsFromLandmarks_CoT @0a4c5e2: NP FORMAT_PROMPT_AD_REASONING + COT_INSTRUCT_DISTANCE."""
    expected = (
        DIST_HEAD
        + "The final answer must be enclosed within <answer> </answer> tags. The answer should be a single decimal "
        "number without units or extra text.\n"
        "Reasoning steps:\n"
        "Step 1: Identify the landmark 1 and record its relative coordinates in the format (x, y) = (relative "
        "position in width direction, relative position in height direction). Denote the coordinates as (x1, y1). "
        "Step 2: Identify the landmark 2 and record its relative coordinates in the same (x, y) format. Denote the "
        "coordinates as (x2, y2). Step 3: Given the pixel dimensions (pixel_width, pixel_height) and image size "
        "(image_width, image_height), compute the physical distance between the two landmarks using: distance = "
        "sqrt(((x2 - x1) * image_width * pixel_width)^2 + ((y2 - y1) * image_height * pixel_height)^2). Report the "
        "reasoning process and final answer within <think> </think> and <answer> </answer> tags, respectively. "
        "Inside <think> </think>, include reasoning and step results using <step-k-reasoning> </step-k-reasoning> "
        "and <step-k-answer> </step-k-answer> tags. \n"
        "Follow the reasoning steps to get the final answer in the required format."
    )
    assert build_prompt(DIST, "-CoT", "current") == expected


def test_current_angle_cot():
    """N create_doc_to_text_BiometricsFromLandmarks_CoT @0a4c5e2 with NP COT_INSTRUCT_ANGLE @f1102c5 (the version
    with "(||A|| ||B||)), where")."""
    expected = ANGLE_HEAD + AD_REASONING + "\nReasoning steps:\n" + COT_ANGLE + "\n" + FOLLOW
    assert build_prompt(ANGLE, "-CoT", "current") == expected
    assert "arccos(|A \u00b7 B| / (||A|| ||B||)), where" in expected


def test_current_ad_cot_wo_instruct():
    """N create_doc_to_text_BiometricsFromLandmarks_CoT_woInstruct @0a4c5e2: ends with AD reasoning + "\\n"."""
    assert build_prompt(DIST, "-CoT-woInstruct", "current") == DIST_HEAD + AD_REASONING + "\n"
    assert build_prompt(ANGLE, "-CoT-woInstruct", "current") == ANGLE_HEAD + AD_REASONING + "\n"


def test_current_ad_cot_scaled_ps_anisotropic():
    """N create_doc_to_text_BiometricsFromLandmarks_CoT_scaledPS @0a4c5e2: h x S_h, w x S_w."""
    s_h, s_w = 1.9198414873929186, 2.5221954734358634
    angle = build_prompt(_with(ANGLE, scale_hw=(s_h, s_w)), "-CoT-scaledPS", "current")
    assert angle == (ANGLE_HEAD.replace("0.268 millimeters (width) x 0.216 millimeters (height)",
                                        "0.676 millimeters (width) x 0.415 millimeters (height)")
                     + AD_REASONING + "\nReasoning steps:\n" + COT_ANGLE + "\n" + FOLLOW)
    dist = build_prompt(_with(DIST, scale_hw=(s_h, s_w)), "-CoT-scaledPS", "current")
    assert dist == (DIST_HEAD.replace("0.161 millimeters (width) x 0.229 millimeters (height)",
                                      "0.405 millimeters (width) x 0.439 millimeters (height)")
                    + AD_REASONING + "\nReasoning steps:\n" + COT_DISTANCE + "\n" + FOLLOW)


def test_current_ad_vp():
    """N create_doc_to_text_BiometricsFromLandmarks_wVisualPrompt @0a4c5e2."""
    tail = DIST_HEAD[DIST_HEAD.index("Additional information:\n"):] + N_FORMAT_AD
    assert build_prompt(DIST, "-VP", "current") == (
        "Task:\n"
        "Given the input medical image, and a line connecting most anterior point of corpus callosum and most "
        "posterior point of corpus callosum, estimate the physical distance of the line in millimeters.\n" + tail
    )
    tail = ANGLE_HEAD[ANGLE_HEAD.index("Additional information:\n"):] + N_FORMAT_AD
    assert build_prompt(ANGLE, "-VP", "current") == (
        "Task:\n"
        "Given the input medical image: cephalogram (head and neck X-ray), a line connecting nasion and subspinale, "
        "and another line connecting nasion and supramentale, estimate the angle between the two lines in "
        "degrees.\n" + tail
    )


def test_current_ad_vp_wo_med_img():
    """N doc_to_text_BiometricsFromLandmarks_wVisualPrompt_woMedImg @0a4c5e2."""
    tail = DIST_HEAD[DIST_HEAD.index("Additional information:\n"):] + N_FORMAT_AD
    assert build_prompt(DIST, "-VP-woMedImg", "current") == (
        "Task:\nEstimate the physical distance of the line in millimeters.\n" + tail)
    tail = ANGLE_HEAD[ANGLE_HEAD.index("Additional information:\n"):] + N_FORMAT_AD
    assert build_prompt(ANGLE, "-VP-woMedImg", "current") == (
        "Task:\nEstimate the angle between the two lines in degrees.\n" + tail)


def test_current_named_angle_and_unnamed_distance():
    """N _get_biometric_prompt_angle/_distance @0a4c5e2 (same sentences as M, unit already normalised)."""
    assert ("estimate the angle of SNA in degrees, which is the angle between 2 lines: (line 1) the line connecting "
            "nasion and subspinale, (line 2) the line connecting nasion and supramentale.\n"
            ) in build_prompt(_with(ANGLE, biometrics_name="SNA"), "-CoT", "current")
    assert ("Given the input medical image, estimate the distance between 2 landmark points in millimeters: "
            "(landmark 1) most anterior point of corpus callosum, (landmark 2) most posterior point of corpus "
            "callosum.\n") in build_prompt(_with(DIST, biometrics_name=""), "", "current")


def test_current_units_cm_and_unknown():
    """N _normalize_metric_unit @0a4c5e2: mm/cm/degree only (list -> its single element); others raise."""
    assert ", in centimeters.\n" in build_prompt(_with(TL, metric_unit=["cm"]), "", "current")
    for bad in ("inch", ["mm", "mm"], " mm"):
        with pytest.raises(ValueError):
            build_prompt(_with(TL, metric_unit=bad), "", "current")


# --------------------------------------------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------------------------------------------


def test_number_format_three_decimals_width_first():
    """M/N pixel_size_text: f"{adjusted_pixel_width:.3f} ... x {adjusted_pixel_height:.3f} ..." (width first); N
    image_size_text: f"The image size is {resized_img_w} pixels (width) x {resized_img_h} pixels (height).\""""
    inp = _with(TL, canvas_hw=(560, 1120), pixel_hw_mm=(0.1, 2.0))
    text = build_prompt(inp, "", "current")
    assert "The image size is 1120 pixels (width) x 560 pixels (height).\n" in text
    assert "The pixel size for this image is 2.000 millimeters (width) x 0.100 millimeters (height).\n" in text
    # rounding is Python's on the exact binary value, as an f-string does
    assert "0.001 millimeters (width) x 1.000 millimeters (height)" in build_prompt(
        _with(TL, pixel_hw_mm=(1.0005, 0.0005)), "", "current")
    # numpy float32 values format like upstream's float32 pixel sizes
    assert "0.330 mm (width) x 0.469 mm (height)" in build_prompt(
        _with(TL, pixel_hw_mm=(np.float32(0.46857143), np.float32(0.33035713))), "", "paper")


@pytest.mark.skipif(int(np.__version__.split(".")[0]) < 2, reason="float32 x Python float stays float32 in numpy 2")
def test_scaled_ps_keeps_float32_arithmetic():
    """N @0a4c5e2 multiplies a float32 pixel size by a Python float (float32 under numpy 2); a float32 input keeps
    that, so this boundary case reads 1.944 (float64 would read 1.943)."""
    p = np.float32(0.8697537183761597)
    s = 2.2345405885259266
    text = build_prompt(_with(TL, pixel_hw_mm=(p, p), scale_hw=(s, s)), "-CoT-scaledPS", "current")
    assert "1.944 millimeters (width) x 1.944 millimeters (height)" in text
    assert format(float(p) * s, ".3f") == "1.943"


# --------------------------------------------------------------------------------------------------------------
# scaledPS factors
# --------------------------------------------------------------------------------------------------------------


def _independent_factors(parts: list[str], draws: int, low=0.5, high=3.0) -> list[float]:
    key = "|".join(parts).encode("utf-8")
    seed = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") % (2**32)
    rng = np.random.RandomState(seed)
    return [float(rng.uniform(low, high)) for _ in range(draws)]


def test_scaled_ps_factors_tl_uniform():
    """N _get_pixel_size_scale_factor(doc, "uniform") @0a4c5e2: key image_file|slice_dim|slice_idx|taskID|label,
    blake2b(8 bytes) big-endian mod 2**32 seeds RandomState; one uniform(0.5, 3.0) draw for both axes."""
    image = "/data/MedVision/Datasets/KiTS23/Images/case_00123.nii.gz"
    s_h, s_w = scaled_ps_factors(image, 2, 41, "01", 2, "TL")
    assert s_h == s_w == 1.642010664579162
    assert [s_h] == _independent_factors([image, "2", "41", "01", "2"], 1)


def test_scaled_ps_factors_ad_anisotropic_without_label():
    """N _get_pixel_size_scale_factor(doc, "anisotropic") @0a4c5e2: two draws (S_h first); A/D docs have no label,
    so doc.get("label", "") puts "" in the key (not "None")."""
    image = "/data/MedVision/Datasets/Ceph-Biometrics-400/Images/001.nii.gz"
    factors = scaled_ps_factors(image, 0, 0, "01", None, "AD")
    assert factors == (1.9198414873929186, 2.5221954734358634)
    assert list(factors) == _independent_factors([image, "0", "0", "01", ""], 2)
    assert list(factors) != _independent_factors([image, "0", "0", "01", "None"], 2)


def test_scaled_ps_factors_range_and_checks():
    """N @0a4c5e2: defaults low 0.5, high 3.0 (env MEDVISION_SCALED_PS_LOW/HIGH there, parameters here)."""
    image = "/x/Images/a.nii.gz"
    for idx in range(50):
        s_h, s_w = scaled_ps_factors(image, 1, idx, "02", None, "AD", low=1.0, high=5.0)
        assert 1.0 <= s_h < 5.0 and 1.0 <= s_w < 5.0
        assert [s_h, s_w] == _independent_factors([image, "1", str(idx), "02", ""], 2, 1.0, 5.0)
    with pytest.raises(TypeError):
        scaled_ps_factors(image, 1, 0, 1, None, "AD")  # taskID must be the doc's string
    with pytest.raises(ValueError):
        scaled_ps_factors(image, 1, 0, "01", 2, "detect")


# --------------------------------------------------------------------------------------------------------------
# Input checks, variants, versions
# --------------------------------------------------------------------------------------------------------------


def test_unknown_variant_names_known_ones():
    with pytest.raises(ValueError) as err:
        build_prompt(TL, "-CoT-foo", "current")
    for v in VARIANTS:
        assert repr(v) in str(err.value)
    with pytest.raises(ValueError, match="protocol"):
        build_prompt(TL, "", "newest")


def test_input_errors_are_clear():
    with pytest.raises(ValueError, match="scale_hw"):
        build_prompt(_with(TL, scale_hw=(2.0, 2.0)), "-CoT", "current")
    with pytest.raises(ValueError, match="canvas_w"):
        build_prompt(_with(TL, canvas_hw=None), "", "current")
    with pytest.raises(ValueError, match="label_name"):
        build_prompt(_with(DETECT, label_name=None), "", "paper")
    with pytest.raises(ValueError, match="4 landmark names"):
        build_prompt(_with(ANGLE, points=("a", "b")), "", "current")
    with pytest.raises(ValueError, match="angle metrics"):
        build_prompt(_with(ANGLE, metric_type="distance", points=("a", "b")), "", "current")
    with pytest.raises(ValueError, match="taskType"):
        build_prompt(_with(TL, task_type="Box-Size"), "", "current")
    # paper-era texts need no canvas
    assert "image size" not in build_prompt(_with(TL, canvas_hw=None), "", "paper")


def test_prompt_versions_cover_every_text():
    for (protocol, family, variant), version in PROMPT_VERSIONS.items():
        assert version == prompt_version(protocol, family, variant)
        build_prompt({"detect": DETECT, "TL": TL, "AD": ANGLE}[family]
                     if variant != "-CoT-scaledPS" else _with(TL if family == "TL" else ANGLE, scale_hw=(1.5, 1.5)),
                     variant, protocol)
    assert len(PROMPT_VERSIONS) == 3 * 4 + (4 + 6 + 6) + 3 * 3  # paper, current texts, current resolution aliases
    assert PROMPT_VERSIONS[("current", "TL", "-560x560")] == PROMPT_VERSIONS[("current", "TL", "")]
    assert len({v for (p, f, var), v in PROMPT_VERSIONS.items() if var not in RESOLUTION_VARIANTS}) == 3 + 16


#: version id -> fingerprint of the wording it names. A changed fingerprint means changed wording: give the template
#: a new version id in prompt_templates.json and record the pair here (never re-pin a new digest under an old id).
PINNED_FINGERPRINTS: dict[str, str] = {
    "paper-detect-1": "18dd804a8a8fb24f77d7e6f4d15b883efe8d77a1efa17c2042f9b0451fc4a072",
    "paper-TL-1": "483d383762c382111f5d7d44857a1a61df3c9771ce5d917c72613f3b3aaeb4cd",
    "paper-AD-1": "0093c923cd807ec75dd2aa9d211255dcc99bb9a71b13c1b609dfdbb958b67524",
    "current-detect-1": "0a12fe076fd7190af343c27a45555bc649853a6c81e1687ddd4fac3c687f3d63",
    "current-detect-CoT-1": "6026b7670cd08c52c4c055aeee7c700be583abc175263e513691de7b1087f0f7",
    "current-detect-VP-1": "097536409e3d7e09abd01bef50d6715b2cf3e35c315926a2b8017110d0aec348",
    "current-detect-VP-woMedImg-1": "8290194ba3f24270b5f6bc8047e135c55ebbd556982da2cc6271c7405ea9c491",
    "current-TL-1": "cf9d2d547ed9a8b149dc18bed7d28fc2c0118e851e8759a60c17c4d6fb0a54b3",
    "current-TL-CoT-1": "39bf6302e0002e4420f1aaf162dcaf94202a2e334e33f9b1e82b986ae3300b01",
    "current-TL-CoT-woInstruct-1": "e27a5f5f6a44af68f7dd6b97996ef7f1d38b80b9cc4cb104ccc57513cd06dd54",
    "current-TL-CoT-scaledPS-1": "cf7cebec49701f484f76a8b8f38e52689dec759f7f2a0f12c71b713bbd956801",
    "current-TL-VP-1": "eca66c5bee1c6d957e2df8753882e99ccb6b3592b6ee720a15c8d94c09dfb232",
    "current-TL-VP-woMedImg-1": "5d96fb2489ec807c05318ca0131501f4f9db355d5aa83787a2c5477f02454c3b",
    # E @e3cf881: the angle's pixel line says millimeters
    "current-AD-2": "a08f148094755df0011145bfd64d8bb9766c55a0f042fdb5340723a7bf1d5563",
    "current-AD-CoT-2": "5800f14070fcb9a7825167083f6cb7d93778ccac4a2a0436c0df2b1cf17cc160",
    "current-AD-CoT-woInstruct-2": "9d5554657e13e71426546ac9f3e620aff41d63dc36d95ea51fc7a727da5f52b9",
    "current-AD-CoT-scaledPS-2": "e0ff439405e9384e0fd9e0df501b2dade6a383b72d70a5ec435378ccf7754e64",
    "current-AD-VP-2": "622142d426656180bc735821b403a08899270a83a5fc98676a491a952c0ed45d",
    "current-AD-VP-woMedImg-2": "2bdd46de26fbcd4584915b7c62cbc33cb9e6096df95fdddb47962e1b447663ce",
}
#: Retired ids (the N @0a4c5e2 A/D texts, whose angle pixel line said degrees): stores asked with them keep them in
#: their answer signature; the ids are never given to another wording.
RETIRED_VERSIONS = frozenset({"current-AD-1", "current-AD-CoT-1", "current-AD-CoT-woInstruct-1",
                              "current-AD-CoT-scaledPS-1", "current-AD-VP-1", "current-AD-VP-woMedImg-1"})


def test_fingerprints_pin_versions():
    seen: dict[str, str] = {}
    for (protocol, family, variant), version in PROMPT_VERSIONS.items():
        digest = template_fingerprint(protocol, family, variant)
        assert seen.setdefault(version, digest) == digest, f"{version} names two different wordings"
    assert seen == PINNED_FINGERPRINTS
    assert not RETIRED_VERSIONS & set(seen)


def _spatial_unit(metric_unit: str) -> str:
    """E _spatial_unit @e3cf881: the pixel-size unit is the answer's unless that is "degrees" (then "millimeters")."""
    return "millimeters" if metric_unit == "degrees" else metric_unit


@pytest.mark.parametrize("variant", [v for (p, f, v) in PROMPT_VERSIONS if (p, f) == ("current", "AD")])
def test_every_current_ad_pixel_line_is_e3cf881s(variant):
    """E @e3cf881 pixel_size_text in every A/D doc_to_text: ``f"The pixel size for this image is {w:.3f}
    {_spatial_unit(u)} (width) x {h:.3f} {_spatial_unit(u)} (height)."``, u = _normalize_metric_unit(metric_unit);
    scaledPS multiplies the pixel size first. Generated pixel sizes, angles and distances (mm and cm)."""
    rng = np.random.default_rng(int(hashlib.sha256(variant.encode()).hexdigest()[:8], 16))
    words = {"mm": "millimeters", "cm": "centimeters", "degree": "degrees"}
    for _ in range(200):
        ph, pw = (np.float32(v) for v in rng.uniform(0.01, 4.0, 2))
        s = tuple(float(v) for v in rng.uniform(0.5, 3.0, 2)) if variant == "-CoT-scaledPS" else (1.0, 1.0)
        for base, unit in ((ANGLE, "degree"), (DIST, "mm"), (DIST, "cm")):
            inp = _with(base, metric_unit=unit, pixel_hw_mm=(ph, pw), scale_hw=s)
            u = _spatial_unit(words[unit])
            line = (f"The pixel size for this image is {pw * s[1]:.3f} {u} (width) x {ph * s[0]:.3f} {u} "
                    "(height).\n")
            text = build_prompt(inp, variant, "current")
            assert line in text, (variant, unit, text)
            assert "degrees (width)" not in text
