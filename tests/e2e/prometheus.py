"""A real Prometheus server for the e2e tests (built by ``k8sbins/build.sh``), on a free
loopback port of whichever network namespace starts it, with the scrape jobs the test gives."""

from __future__ import annotations

import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from .cluster import Process
from .kube import wait_for


@dataclass(frozen=True)
class PromTools:
    prometheus: str
    promtool: str


def find_tools(bin_dir: Path) -> PromTools:
    """The Prometheus and promtool that ``k8sbins/build.sh`` builds with the other binaries."""
    return PromTools(str(bin_dir / "prometheus"), str(bin_dir / "promtool"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str, timeout: float = 5) -> bytes:
    with _OPENER.open(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body


class Prometheus:
    """A Prometheus server on a free loopback port running ``scrape_configs`` every second;
    its config and log go to ``run_dir``, its TSDB to ``storage``."""

    def __init__(
        self,
        tools: PromTools,
        scrape_configs: list[dict[str, Any]],
        run_dir: Path,
        storage: Path,
        env: Mapping[str, str],
        rule_files: tuple[Path, ...] = (),
    ) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        jobs = [{"scrape_interval": "1s", "scrape_timeout": "1s", **j} for j in scrape_configs]
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": jobs,
            "rule_files": [str(f) for f in rule_files],
        }
        config_file = run_dir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        subprocess.run(
            [tools.promtool, "check", "config", str(config_file)],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        log = run_dir / "prometheus.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [
                    tools.prometheus,
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={storage}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.process = Process("prometheus", popen, log)

    def wait_ready(self, timeout: float = 60) -> None:
        def ready() -> bool:
            if not self.process.alive():
                raise self.process.fail("while starting")
            try:
                return get(f"{self.url}/-/ready") is not None
            except OSError:
                return False

        wait_for(ready, timeout=timeout, what="Prometheus to be ready")

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's vector: [{'metric': {...}, 'value': [ts, '1.5']}, ...]."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        answer = orjson.loads(get(url))
        assert answer["status"] == "success", answer
        assert answer["data"]["resultType"] == "vector", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's label_values(match, label) lists."""
        query = urllib.parse.urlencode({"match[]": match})
        answer = orjson.loads(get(f"{self.url}/api/v1/label/{label}/values?{query}"))
        assert answer["status"] == "success", answer
        values: list[str] = answer["data"]
        return values

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule with its health, last error and alerts (/api/v1/rules)."""
        answer = orjson.loads(get(f"{self.url}/api/v1/rules"))
        assert answer["status"] == "success", answer
        return [rule for group in answer["data"]["groups"] for rule in group["rules"]]

    def by(self, label: str, promql: str) -> dict[str, float]:
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in self.query(promql)}

    def stop(self) -> None:
        self.process.stop()
