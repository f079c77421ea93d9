# suite_conftest.py: the conftest.py of the offline copy of llama.cpp's server tests (build/upstream-tests), written by
# scripts/upstream-server-suite.sh in place of upstream's conftest.py. Same per-test server cleanup
# as upstream; upstream's session fixture ServerPreset.load_all() (which downloads every preset's
# model from Hugging Face) is left out: the models are local (beaconkv_upstream.MODEL_MAP).
import pytest

from beaconkv_upstream import *  # noqa: F401,F403  (patches utils before any test module imports it)
from beaconkv_upstream import pytest_collection_modifyitems  # noqa: F401
from utils import *


# ref: https://stackoverflow.com/questions/22627659/run-code-before-and-after-each-test-in-py-test
@pytest.fixture(autouse=True)
def stop_server_after_each_test():
    # do nothing before each test
    yield
    # stop all servers after each test
    instances = set(
        server_instances
    )  # copy the set to prevent 'Set changed size during iteration'
    for server in instances:
        server.stop()
