"""`llamay run -m MODEL` as a chat, driven through a real pseudo-terminal (pexpect) with the real
model: history across turns, /set, /show, /clear, multi-line input, Ctrl-C during an answer,
and the ways to leave. `-stats` prints each turn's token counts on the terminal, which is how
the tests see what the model was sent (greedy decoding, so runs repeat)."""

import os
import re

import pexpect

from conftest import MODEL, REPO

BIN = os.environ.get("LLAMAY_BIN", str(REPO / "target" / "release" / "llamay"))
PROMPT = ">>> "
STATS = re.compile(r"prompt (\d+) tokens in .*? generated (\d+) in .*? stop: (\w+)")


def start():
    child = pexpect.spawn(BIN, ["run", "-m", MODEL, "-temp", "0", "-seed", "7", "-stats", "-t", "1", "-n", "48"],
                          encoding="utf-8", timeout=180, dimensions=(40, 240))
    child.expect_exact("Type /? for help")
    child.expect_exact(PROMPT)
    return child


def ask(child, text):
    """Sends one message; returns (answer shown, prompt tokens, generated tokens, stop)."""
    child.sendline(text)
    child.expect(STATS)
    answer = child.before
    prompt_tokens, generated, stop = int(child.match.group(1)), int(child.match.group(2)), child.match.group(3)
    child.expect_exact(PROMPT)
    return answer, prompt_tokens, generated, stop


def command(child, text, expected):
    """Sends a command; returns everything it printed up to the next prompt."""
    child.sendline(text)
    child.expect_exact(expected)
    shown = child.before + child.after
    child.expect_exact(PROMPT)
    return shown + child.before


def test_a_conversation_keeps_history_settings_and_multiline_input():
    child = start()
    command(child, "/?", "/set NAME VALUE")

    _, first_prompt, first_generated, _ = ask(child, "My name is Zorblax. Remember it.")
    answer, second_prompt, _, _ = ask(child, "What is my name?")
    # The second turn was sent with the first question and its answer.
    assert second_prompt > first_prompt + first_generated, (first_prompt, first_generated, second_prompt)
    assert "Zorblax" in answer, answer

    command(child, "/clear", "Cleared the conversation.")
    _, cleared_prompt, _, _ = ask(child, "My name is Zorblax. Remember it.")
    assert cleared_prompt == first_prompt, "after /clear the prompt is a first turn again"

    command(child, "/set temperature 0.2", "Set 'temperature' to '0.2'.")
    command(child, "/set parameter num_predict 5", "Set 'num_predict' to '5'.")
    command(child, "/set top_k many", "'top_k' takes a whole number")
    command(child, "/set system You answer in one word.", "Set the system message.")
    shown = command(child, "/show", "history         2 messages")
    for line in ["model           " + MODEL, "temperature     0.2", "num_predict     5", "system          You answer in one word."]:
        assert line in shown, shown
    _, _, generated, stop = ask(child, "Tell me about the sea.")
    assert generated <= 5 and stop == "length", (generated, stop)

    command(child, "/clear", "Cleared the conversation.")
    command(child, "/set system", "Cleared the system message.")
    _, one_line_prompt, _, _ = ask(child, "Say hi")
    command(child, "/clear", "Cleared the conversation.")
    child.sendline('"""Say hi')
    child.expect_exact("... ")
    child.sendline("and then")
    child.expect_exact("... ")
    child.sendline('say bye"""')
    child.expect(STATS)
    multi_line_prompt = int(child.match.group(1))
    child.expect_exact(PROMPT)
    assert multi_line_prompt > one_line_prompt
    # Three typed lines made one message.
    command(child, "/show", "history         2 messages")

    command(child, "/frobnicate", "unknown command '/frobnicate'")
    child.sendline("/bye")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_c_stops_an_answer_and_the_chat_goes_on():
    child = start()
    command(child, "/set num_predict 3000", "Set 'num_predict' to '3000'.")
    child.sendline("Write a very long story about a lighthouse keeper and the sea.")
    child.expect_exact("the sea.")
    child.expect_exact("\n")
    # Some of the answer has streamed: the stats line has not (it would end the answer).
    child.expect(r"\w+ \w+ \w+ \w+ \w+")
    child.sendintr()
    child.expect_exact("[stopped]", timeout=30)
    child.expect_exact(PROMPT, timeout=30)
    # The stopped answer is in the history, and the next turn works.
    command(child, "/show", "history         2 messages")
    command(child, "/set num_predict 4", "Set 'num_predict' to '4'.")
    _, _, generated, _ = ask(child, "Say ok.")
    assert 0 < generated <= 4
    # Ctrl-C on a line with text clears it; at an empty prompt it leaves.
    child.send("half a thought")
    child.sendintr()
    child.sendline("/show")
    child.expect_exact("history         4 messages")
    child.expect_exact(PROMPT)
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_d_leaves():
    child = start()
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
