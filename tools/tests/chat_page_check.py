"""Drives ridge's chat page in headless Chromium, as a person would.

Usage: chat_page_check.py BASE_URL API_KEY SCREENSHOT.png [remeasured]

With `remeasured` the server was given a bandwidth far below the machine's (as a first probe
slowed by other processes reads), so the answer beats its floor: the page must say "floor
re-measured", never a figure above 100%. Without it the roofline is a percentage up to 100 (or
"floor re-measured", when the answer beat the floor the server started with).

The server must run with `--api-key API_KEY`. The script opens the page, sends a question
without the key (the page must show the 401 and ask for the key), enters the key, regenerates
the answer, and checks that it streamed (several visible updates of the text), that the
answer's TTFT, TPOT, decode rate and roofline efficiency appear, that the live server panel
shows the engine's state, that the conversation survives a reload, and that Stop ends a
long answer. Exits non-zero with a message on the first failed check; prints a JSON summary.
"""

import json
import re
import shutil
import sys

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait


def check(cond, what):
    if not cond:
        raise SystemExit(f"chat page check failed: {what}")


def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    check(chromium and driver, "chromium and chromedriver must be installed (scripts/test installs them)")
    opts = Options()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,880", "--force-device-scale-factor=1"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service(driver), options=opts)


def main():
    base, key, shot = sys.argv[1], sys.argv[2], sys.argv[3]
    remeasured = sys.argv[4:5] == ["remeasured"]
    d = browser()
    wait = WebDriverWait(d, 120, poll_frequency=0.05)
    el = lambda css: d.find_element(By.CSS_SELECTOR, css)
    els = lambda css: d.find_elements(By.CSS_SELECTOR, css)
    summary = {}
    try:
        d.get(base + "/")
        wait.until(lambda _: el("#live-running").text not in ("", "–"))
        check("ctx" in el("#model").text, f"model line: {el('#model').text!r}")

        def setting(id_, value):
            f = el("#" + id_)
            f.clear()
            f.send_keys(value)
            d.execute_script("arguments[0].dispatchEvent(new Event('change'))", f)

        setting("temperature", "0")
        setting("max_tokens", "48")
        setting("system", "You are a helpful assistant.")

        # 1. Without the key: the 401 is shown and the key field asked for.
        el("#prompt").send_keys("What is the capital of France?")
        el("#send").click()
        wait.until(lambda _: els(".msg.assistant.error"))
        err = el(".msg.assistant.error").text
        check("API key" in err, f"401 not explained: {err!r}")

        # 2. With the key, regenerate: the answer streams in several visible updates.
        setting("api_key", key)
        d.execute_script("""
            window.__updates = [];
            new MutationObserver(() => {
              const t = document.querySelector('.msg.assistant:last-child .text');
              if (t) window.__updates.push(t.textContent.length);
            }).observe(document.getElementById('messages'),
                       {subtree: true, childList: true, characterData: true});
        """)
        el("#regen").click()
        wait.until(lambda _: els(".msg.assistant .stats") and not el("#send").get_attribute("disabled"))
        answer = el(".msg.assistant .text").text
        updates = d.execute_script("return window.__updates")
        growing = sorted(set(u for u in updates if u > 0))
        check(len(growing) >= 3, f"answer did not stream: text lengths seen {growing}")
        check("Paris" in answer, f"answer: {answer!r}")
        stats = {k: el(f".msg.assistant .stats .{k} b").text
                 for k in ("ttft", "tpot", "rate", "roof", "floor", "count")}
        check(re.fullmatch(r"\d+ ms", stats["ttft"]), f"TTFT shown as {stats['ttft']!r}")
        check(re.fullmatch(r"\d+\.\d ms", stats["tpot"]), f"TPOT shown as {stats['tpot']!r}")
        check(re.fullmatch(r"\d+\.\d tok/s", stats["rate"]), f"rate shown as {stats['rate']!r}")
        roof = stats["roof"]
        if remeasured:
            check(roof == "floor re-measured", f"roofline shown as {roof!r}")
        else:
            pct = re.fullmatch(r"(\d+)%", roof)
            check((pct and int(pct.group(1)) <= 100) or roof == "floor re-measured",
                  f"roofline shown as {roof!r}")
        check(int(stats["count"]) > 1, f"token count {stats['count']!r}")
        summary.update(answer=answer, stats=stats, updates=len(growing))
        wait.until(lambda _: el("#live-rate").text not in ("", "–"))
        summary["live"] = el("#live").text
        d.save_screenshot(shot)

        # 3. The conversation is kept in the browser across a reload.
        d.refresh()
        wait.until(lambda _: els(".msg.assistant .stats"))
        check(els(".msg.assistant .text")[-1].text == answer, "conversation lost on reload")
        check(el("#api_key").get_attribute("value") == key, "settings lost on reload")

        # 4. Stop ends a long answer early and keeps what came.
        setting("max_tokens", "400")
        el("#prompt").send_keys("Write a long story about a lighthouse keeper.")
        el("#send").click()
        wait.until(lambda _: len(els(".msg.assistant")) == 2
                   and len(els(".msg.assistant .text")[-1].text) > 20)
        el("#stop").click()
        wait.until(lambda _: "[stopped]" in els(".msg.assistant .text")[-1].text)
        check(not el("#send").get_attribute("disabled"), "send disabled after stop")
        summary["stopped_chars"] = len(els(".msg.assistant .text")[-1].text)
    finally:
        d.quit()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
