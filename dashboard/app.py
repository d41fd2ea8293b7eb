"""The dashboard's entry script: ``streamlit run app.py`` (or ``agentlat dashboard``).

Pages are the ``page_*.py`` scripts beside this file; the sidebar's window, service and
route apply to all of them and live in the URL with each page's own filters.
"""

from __future__ import annotations

import time
from pathlib import Path

import streamlit as st

from agentlat.dashboard import ui

PAGES = (
    ("page_overview.py", "Overview", ":material/speed:", "overview"),
    ("page_routes.py", "Routes & models", ":material/table_chart:", "routes"),
    ("page_cache.py", "Prompt cache", ":material/cached:", "cache"),
    ("page_compare.py", "Compare", ":material/compare_arrows:", "compare"),
    ("page_traces.py", "Trace explorer", ":material/waterfall_chart:", "traces"),
    ("page_budgets.py", "Budgets & alerts", ":material/notifications:", "budgets"),
    ("page_advisor.py", "Advisor", ":material/lightbulb:", "advisor"),
)
# A local file: a material icon name as page_icon makes the browser fetch the favicon from a font CDN.
FAVICON = Path(__file__).with_name("favicon.png")


def main() -> None:
    started = time.time()
    ui.await_warm_up()
    st.set_page_config(page_title="agentlat", page_icon=str(FAVICON), layout="wide")
    pages = [
        st.Page(path, title=title, icon=icon, url_path=url, default=i == 0)
        for i, (path, title, icon, url) in enumerate(PAGES)
    ]
    page = st.navigation(pages)
    ui.sidebar()
    sidebar_done = time.time()
    try:
        page.run()
    finally:
        ui.log_run(page.url_path or "overview", started, sidebar_done)
        ui.warm_up()  # after the first page: what the other pages import


main()
