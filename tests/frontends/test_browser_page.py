"""The page at / in a real headless Chromium (Debian chromium + chromium-driver, driven over WebDriver), its
microphone fed a WAV through Chromium's fake capture device: the final transcript appears on the page. A
screenshot goes to $ASR_SCREENSHOT when set (docs/web_page.png was made so)."""

from __future__ import annotations

import asyncio
import os
import shutil
import time

import numpy as np
import pytest
import soundfile

from asr_client.audio import load_audio
from tests.conftest import BUNDLED_REPO, ROOT
from tests.frontends.webdriver import Chromium

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="no Chromium and chromedriver here (bash "
                       "scripts/get_chromium.sh installs Debian's; CI runs it)"),
    pytest.mark.skipif(not (BUNDLED_REPO / "encoder" / "1" / "encoder.onnx").exists(),
                       reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh"),
]
UTT, TEXT = "test_b_000000", "can you bring two chairs to the beach"


FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--use-fake-ui-for-media-stream",
         "--use-fake-device-for-media-stream", "--autoplay-policy=no-user-gesture-required", "--window-size=1000,700")


async def test_the_page_shows_the_final_transcript_of_the_microphone(running, tmp_path):
    speech = load_audio(ROOT / "tests" / "data" / "demo_utts" / f"{UTT}.flac").samples
    silence = np.zeros(16000, np.float32)
    wav = tmp_path / "mic.wav"  # Chromium loops the file: speech, then a pause long enough for an endpoint
    soundfile.write(wav, np.concatenate([silence[:8000], speech, silence, silence, silence]), 16000,
                    subtype="PCM_16")
    async with running(BUNDLED_REPO, allow_grpc=False) as server:
        def drive() -> str:
            driver = Chromium(CHROMIUM, DRIVER, [*FLAGS, f"--use-file-for-fake-audio-capture={wav}"])
            try:
                driver.get(f"http://127.0.0.1:{server.http_port}/")
                driver.click("#start")
                finals: list[str] = []
                # Up to 30 s. Chromium loops the file, so each pass ends in a final of its own: on a loaded
                # machine the capture's first moments can glitch, and a later pass still shows the page works.
                for _ in range(300):
                    finals = driver.script("return [...document.querySelectorAll('#finals p')]"
                                           ".map(p => p.dataset.text);")
                    if TEXT in finals:
                        break
                    time.sleep(0.1)
                driver.click("#stop")
                if os.environ.get("ASR_SCREENSHOT"):
                    driver.screenshot(os.environ["ASR_SCREENSHOT"])
                return finals
            finally:
                driver.quit()

        finals = await asyncio.to_thread(drive)
    assert TEXT in finals, finals
