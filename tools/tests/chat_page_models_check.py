"""Drives ridge's chat page against a server with two models: the picker lists both with
their state, and the answer comes from the model picked.

Usage: chat_page_models_check.py BASE_URL FIRST_MODEL SECOND_MODEL

The server must serve both, the first loaded at start and the second not yet. Prints a JSON
summary; exits non-zero with a message on the first failed check.
"""

import json
import sys
import urllib.request

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from chat_page_check import browser, check


def state(base):
    with urllib.request.urlopen(base + "/state") as r:
        return {m["model"]: m["status"] for m in json.load(r)["models"]}


def main():
    base, first, second = sys.argv[1], sys.argv[2], sys.argv[3]
    check(state(base) == {first: "loaded", second: "unloaded"}, f"start state {state(base)}")
    d = browser()
    wait = WebDriverWait(d, 120, poll_frequency=0.05)
    el = lambda css: d.find_element(By.CSS_SELECTOR, css)
    els = lambda css: d.find_elements(By.CSS_SELECTOR, css)
    summary = {}
    try:
        d.get(base + "/")
        wait.until(lambda _: len(els("#model-pick option")) == 2)
        pick = Select(el("#model-pick"))
        labels = [o.text for o in pick.options]
        check(labels == [first, f"{second} (unloaded)"], f"picker shows {labels}")
        check(pick.first_selected_option.get_attribute("value") == first, "default is the first")
        pick.select_by_value(second)
        f = el("#max_tokens")
        f.clear()
        f.send_keys("8")
        d.execute_script("arguments[0].dispatchEvent(new Event('change'))", f)
        el("#prompt").send_keys("Hello")
        el("#send").click()
        wait.until(lambda _: els(".msg.assistant .stats") or els(".msg.assistant.error"))
        check(not els(".msg.assistant.error"), el(".msg.assistant").text)
        # The request went to the picked model: it loaded on first use.
        check(state(base)[second] == "loaded", f"after the answer: {state(base)}")
        wait.until(lambda _: [o.text for o in Select(el("#model-pick")).options] == [first, second])
        summary["answer"] = el(".msg.assistant .text").text
        # The choice survives a reload.
        d.refresh()
        wait.until(lambda _: len(els("#model-pick option")) == 2)
        got = Select(el("#model-pick")).first_selected_option.get_attribute("value")
        check(got == second, f"picked model after reload: {got}")
    finally:
        d.quit()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
