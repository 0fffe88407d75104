"""Shared settings for the end-to-end tests: where the daemon is and which models to use.

run.sh starts the daemon and sets LLAMAY_URL; pointing LLAMAY_URL at a running daemon works too.
"""

import os
import pathlib

import pytest
import requests

BASE = os.environ.get("LLAMAY_URL", "http://127.0.0.1:11435")
MODEL = os.environ.get("LLAMAY_MODEL", "smollm2:135m")
OTHER_MODEL = os.environ.get("LLAMAY_OTHER_MODEL", "gemma3:270m")
REPO = pathlib.Path(__file__).resolve().parent.parent


def installed_models():
    return {m["name"] for m in requests.get(f"{BASE}/api/tags", timeout=10).json()["models"]}


def loaded_models():
    return [m["name"] for m in requests.get(f"{BASE}/api/ps", timeout=10).json()["models"]]


def stats_for(name):
    for model in requests.get(f"{BASE}/v1/stats", timeout=10).json()["models"]:
        if model["name"] == name:
            return model
    return None


@pytest.fixture
def other_model():
    if OTHER_MODEL not in installed_models():
        pytest.skip(f"{OTHER_MODEL} is not installed (scripts/setup installs it)")
    return OTHER_MODEL
