"""Keys fed to the app as a terminal would send them."""

from __future__ import annotations

import threading
import time

from textual._xterm_parser import XTermParser


def feed(app, data: str) -> threading.Thread:
    """Parse ``data`` as the terminal driver does and hand every event to the app's driver."""
    driver = app._driver

    def run() -> None:
        parser = XTermParser(False)
        for i in range(0, len(data), 4096):  # the driver reads 4 kB at a time
            for event in parser.feed(data[i : i + 4096]):
                driver.process_message(event)
        for _ in range(20):  # the driver ticks the parser after each 0.1 s select: a lone
            time.sleep(0.1)  # ESC (or one starting a sequence) is a key once nothing follows
            for event in parser.tick():
                driver.process_message(event)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t
