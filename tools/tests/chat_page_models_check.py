"""Drives ridge's chat page against a server with two models: the picker lists both with
their state, and the answer comes from the model picked.

Usage: chat_page_models_check.py BASE_URL FIRST_MODEL SECOND_MODEL

The server must serve both, the first loaded at start and the second not yet. Prints a JSON
summary; exits non-zero with a message on the first failed check.
"""

import json
import sys
import urllib.request

from selenium.common.exceptions import StaleElementReferenceException
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
    # The page re-renders the picker from /state as models load: an element found before a
    # re-render goes stale, so waits retry on that, and the picker is read in one script.
    wait = WebDriverWait(
        d, 120, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    )
    el = lambda css: d.find_element(By.CSS_SELECTOR, css)
    els = lambda css: d.find_elements(By.CSS_SELECTOR, css)
    options = lambda: d.execute_script(
        "return [...document.querySelectorAll('#model-pick option')].map(o => o.textContent)"
    )
    picked = lambda: d.execute_script("return document.querySelector('#model-pick').value")
    summary = {}
    try:
        d.get(base + "/")
        wait.until(lambda _: len(options()) == 2)
        labels = options()
        check(labels == [first, f"{second} (unloaded)"], f"picker shows {labels}")
        check(picked() == first, "default is the first")
        wait.until(lambda _: Select(el("#model-pick")).select_by_value(second) or True)
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
        wait.until(lambda _: options() == [first, second])
        summary["answer"] = el(".msg.assistant .text").text
        # The choice survives a reload.
        d.refresh()
        wait.until(lambda _: len(options()) == 2)
        got = picked()
        check(got == second, f"picked model after reload: {got}")
    finally:
        d.quit()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
