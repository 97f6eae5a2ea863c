"""pytest hooks of the Python tests: when a test fails, the last lines of
the logs of the clusters the tests started are printed after the summary
(the clusters and their temporary directories are gone by then)."""
import os

import pytest

LOG_TAIL_LINES = 300


def pytest_configure(config):
    config.shmap_cluster_logs = []


@pytest.fixture(scope="session")
def cluster_log(request, tmp_path_factory):
    """new(tag): a path for a cluster's log, printed if a test fails;
    keep(path): print an existing log if a test fails."""
    class Logs:
        def new(self, tag):
            return self.keep(tmp_path_factory.mktemp(tag) / "coordinator.log")

        def keep(self, path):
            request.config.shmap_cluster_logs.append(os.fspath(path))
            return path
    return Logs()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    stats = terminalreporter.stats
    if not stats.get("failed") and not stats.get("error"):
        return
    for path in getattr(config, "shmap_cluster_logs", []):
        try:
            with open(path, errors="replace") as f:
                lines = f.readlines()
        except OSError as e:
            terminalreporter.write_line(f"cluster log {path}: {e}")
            continue
        terminalreporter.section(f"cluster log {path}: last {LOG_TAIL_LINES} of {len(lines)} "
                                 "lines")
        terminalreporter.write("".join(lines[-LOG_TAIL_LINES:]))
