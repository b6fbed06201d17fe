"""Messages in the learner's language (tfcourse.messages): every message the package shows a learner has a
Chinese form (tools/messages.py reads them from the source), a Chinese lesson's checks speak Chinese and
name the mistake as exactly as the English, and the grade table and the feedback report follow."""

from __future__ import annotations

import re

import pytest

from tfcourse import messages
from tfcourse.checks.attention import check_scaled_dot_product_attention
from tfcourse.checks.core import CheckFailed
from tools import messages as source_messages

from test_checks_attention import _sdpa_variant, sdpa


def chinese(text: str) -> bool:
    return bool(re.search(r"[\u4e00-\u9fff]", text))


@pytest.fixture
def in_chinese(monkeypatch):
    monkeypatch.setattr(messages, "_lesson_language", ["zh"])
    monkeypatch.delenv("TFCOURSE_LANGUAGE", raising=False)
    yield


def test_every_message_of_the_package_has_a_chinese_form():
    found = source_messages.problems("zh")
    assert found == [], "translate them in tfcourse/messages_zh.json (python tools/messages.py --add):\n" + \
        "\n".join(found[:20])


def test_the_source_reader_finds_fstrings_sums_success_lines_and_mistakes():
    import ast

    tree = ast.parse('''
raise CheckFailed(f"{what}: expected shape {shape_str(x)}, got " + str(y))
ex = Exercise("FFN", (), "{name} matches on {n} inputs ({n} in all)")
mistakes = {f"h_{{t-1}} left out at {where}": 1}
mistakes["the mask *inverted*"] = 2
say("pass")
raise CheckFailed(message)
''')
    found = [template for template, _ in source_messages._messages_in(tree)]
    assert sorted(found) == sorted(["{1}: expected shape {2}, got {3}", "{1} matches on {2} inputs ({2} in all)",
                                    "h_{{t-1}} left out at {1}", "the mask *inverted*", "pass"])


def test_a_template_catches_its_values_and_translates_each_one_it_knows():
    catalogue = messages.Catalogue([
        {"en": "{1}: your output equals {2}", "zh": "{1}：你的输出等于{2}"},
        {"en": "attention *without* the 1/√d_k scaling", "zh": "没有 1/√d_k 缩放的注意力"},
        {"en": "{1}: expected shape {2}, got {3}", "zh": "{1}：形状应为 {2}，实际为 {3}"},
        {"en": "h_{{t-1}} is missing", "zh": "少了 h_{{t-1}}"},
        {"en": "not translated yet {1}", "zh": ""},
    ], "zh")
    assert catalogue.translate("sdpa(q, k, v): your output equals attention without the 1/√d_k scaling") == \
        "sdpa(q, k, v)：你的输出等于没有 1/√d_k 缩放的注意力"
    assert catalogue.translate("out: a: expected shape (2, 3), got (3, 2)") == "out: a：形状应为 (2, 3)，实际为 (3, 2)"
    assert catalogue.translate("h_{t-1} is missing") == "少了 h_{t-1}"
    assert catalogue.translate("not translated yet 5") == "not translated yet 5"  # stays English
    assert catalogue.translate("something else") == "something else"


def test_english_stays_english_and_the_environment_overrides_the_lesson(monkeypatch):
    monkeypatch.setattr(messages, "_lesson_language", ["en"])
    monkeypatch.delenv("TFCOURSE_LANGUAGE", raising=False)
    assert messages.say("pass") == "pass"
    monkeypatch.setenv("TFCOURSE_LANGUAGE", "zh")
    assert messages.say("pass") == "通过"
    with pytest.raises(ValueError, match="language must be one of"):
        messages.set_lesson_language("fr")


@pytest.mark.parametrize("wrong, english", [
    (_sdpa_variant(divide_by="none"), "without the 1/√d_k scaling"),
    (_sdpa_variant(dim=-2), "softmax over the queries"),
    (_sdpa_variant(fill=0.0), "masked scores set to 0 instead of -inf"),
    (lambda *args, **kwargs: sdpa(*args, **kwargs)[0], "return a pair"),
])
def test_a_chinese_lessons_check_names_the_mistake_in_chinese(wrong, english, in_chinese):
    with pytest.raises(CheckFailed) as failure:
        check_scaled_dot_product_attention(wrong)
    message = str(failure.value)
    assert chinese(message) and english not in message, message


def test_the_scaling_mistake_reads_as_exactly_as_in_english(in_chinese):
    with pytest.raises(CheckFailed, match="你的输出等于.*没有 1/√d_k 缩放"):
        check_scaled_dot_product_attention(_sdpa_variant(divide_by="none"))


def test_a_chinese_lessons_tick_line_is_chinese(in_chinese, capsys):
    check_scaled_dot_product_attention(sdpa)
    out = capsys.readouterr().out
    assert out.startswith("✔ ") and chinese(out), out


def test_the_grade_table_speaks_chinese(in_chinese, capsys):
    from tfcourse.course.results import ExerciseGrade, LessonGrade, print_table

    result = LessonGrade("03_attention", None, exercises=[
        ExerciseGrade("a", 2, 2, "", "Exercise 1 — dot_product_variance"),
        ExerciseGrade("b", 0, 2, "✘ sdpa：你的输出等于…", "Exercise 2 — scaled_dot_product_attention")])
    result.not_run = 3
    print_table([result])
    out = capsys.readouterr().out
    assert "2 / 4 分" in out and "练习 1——dot_product_variance" in out and "未通过" in out and "总计" in out, out
    assert "演示单元格" in out and "points" not in out and "Exercise" not in out


def test_the_feedback_report_says_its_own_words_in_chinese():
    from tfcourse.course.autograde import localized_feedback

    html = '<h4>03_attention (Score: 2.0 / 4.0)</h4><li><a href="#x">Test cell</a> (Score: 1 / 1)</li>'
    assert localized_feedback(html, "zh") == \
        '<h4>03_attention (得分：2.0 / 4.0)</h4><li><a href="#x">测试单元格</a> (得分：1 / 1)</li>'
    assert "Score" not in localized_feedback(html, "zh")



@pytest.mark.parametrize(("message", "plain"), [
    ("这是*重点*内容，`d_k` 要开方", "这是重点内容，'d_k' 要开方"), ("the *first* one", "the first one"),
    ("2 * d and 3 * e", "2 * d and 3 * e"), ("a*b*c", "a*b*c"),
])
def test_plain_text_drops_emphasis_next_to_chinese_too(message, plain):
    assert messages.plain_text(message) == plain


def _layer_norm_over_the_batch():
    from test_checks_blocks import _ln_wrong_dim, make_layer_norm
    from tfcourse.checks.blocks import check_layer_norm
    return check_layer_norm, make_layer_norm(_ln_wrong_dim(0))


def _lstm_with_tanh_on_the_forget_gate():
    from test_checks_rnn import make_lstm
    from tfcourse.checks.rnn import check_lstm_cell
    return check_lstm_cell, make_lstm(tanh_on="f")


@pytest.mark.parametrize("make, english, in_chinese_words", [
    (_layer_norm_over_the_batch, "the batch dimension", "批次维（dim 0）"),
    (_lstm_with_tanh_on_the_forget_gate, "forget gate", "遗忘门 f"),
])
def test_a_phrase_put_into_a_message_is_chinese_too(make, english, in_chinese_words, monkeypatch):
    """Whether the check speaks Chinese itself or its English line is translated afterwards (as the
    provenance table does), the phrase that fills a template's value is Chinese, not left in English."""
    check, learner = make()
    with pytest.raises(CheckFailed) as failure:
        check(learner)
    said_afterwards = messages.say(str(failure.value), "zh")
    monkeypatch.setattr(messages, "_lesson_language", ["zh"])
    monkeypatch.delenv("TFCOURSE_LANGUAGE", raising=False)
    with pytest.raises(CheckFailed) as failure:
        check(learner)
    for message in (str(failure.value), said_afterwards):
        assert in_chinese_words in message and english not in message, message
