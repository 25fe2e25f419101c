"""``ensure_topics`` and ``turnflow topics`` against a fake admin client: what is created, what
is refused before anything is created, and how a found topic that differs is reported."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.admin import NewTopic

from consumer import cli
from consumer.cli import topics as topics_command
from consumer.cli.topics import topic_specs
from consumer.settings import Settings
from consumer.topics import TooFewBrokersError, TopicReport, TopicSpec, ensure_topics_with

_EXISTS = 36


class FakeAdmin:
    """A cluster of ``brokers`` brokers holding ``existing`` topics (name -> partitions,
    replication factor, min.insync.replicas); ``create_topics`` adds the new ones."""

    def __init__(self, brokers: int, existing: dict[str, tuple[int, int, str]] | None = None):
        self.brokers = brokers
        self.topics = dict(existing or {})
        self.created: list[NewTopic] = []

    async def describe_cluster(self) -> dict[str, Any]:
        return {"brokers": [{"node_id": n} for n in range(1, self.brokers + 1)]}

    async def create_topics(self, new_topics: list[NewTopic]) -> Any:
        errors = []
        for topic in new_topics:
            if topic.name in self.topics:
                errors.append((topic.name, _EXISTS, ""))
                continue
            self.created.append(topic)
            insync = topic.topic_configs.get("min.insync.replicas", "1")
            self.topics[topic.name] = (topic.num_partitions, topic.replication_factor, insync)
            errors.append((topic.name, 0, ""))
        return SimpleNamespace(topic_errors=errors)

    async def describe_topics(self, topics: list[str] | None = None) -> list[Any]:
        out = []
        for name in topics or []:
            partitions, factor, _ = self.topics[name]
            out.append({"topic": name, "error_code": 0, "partitions": [
                {"partition": p, "leader": 1, "replicas": list(range(1, factor + 1))}
                for p in range(partitions)
            ]})
        return out

    async def describe_configs(self, config_resources: list[Any]) -> list[Any]:
        resources = [{
            "error_code": 0, "resource_name": r.name,
            "config_entries": [{"config_names": "min.insync.replicas",
                                "config_value": self.topics[r.name][2]}],
        } for r in config_resources]
        return [SimpleNamespace(to_object=lambda: {"resources": resources})]


async def test_new_topics_get_their_replication_and_min_insync_replicas() -> None:
    """A topic that does not exist is created with the partitions, replication factor and
    ``min.insync.replicas`` asked for, and reported as created."""
    admin = FakeAdmin(brokers=3)
    reports = await ensure_topics_with(admin, [TopicSpec("in", 12, 3, 2)])
    assert reports == [TopicReport("in", created=True, partitions=12)]
    [made] = admin.created
    assert (made.num_partitions, made.replication_factor) == (12, 3)
    assert made.topic_configs == {"min.insync.replicas": "2"}


async def test_a_replication_factor_above_the_brokers_creates_nothing() -> None:
    """Replication factor 3 on a one-broker cluster is refused, naming both numbers, before
    any topic is created (Kafka would refuse it per topic, after making the others)."""
    admin = FakeAdmin(brokers=1)
    with pytest.raises(TooFewBrokersError, match="replication factor 3 needs 3 brokers; the "
                       "cluster has 1"):
        await ensure_topics_with(admin, [TopicSpec("in", 2, 1), TopicSpec("out", 2, 3, 2)])
    assert admin.created == []


async def test_a_found_topic_that_differs_is_reported_not_altered() -> None:
    """An existing topic with other partitions, replication factor and min.insync.replicas
    is reported with each difference and left as it was; one that matches has none."""
    admin = FakeAdmin(brokers=3, existing={"in": (6, 1, "1"), "out": (12, 3, "2")})
    reports = await ensure_topics_with(admin, [TopicSpec("in", 12, 3, 2),
                                               TopicSpec("out", 12, 3, 2)])
    assert reports == [
        TopicReport("in", created=False, partitions=6, differences=(
            "6 partitions (12 asked for)", "replication factor 1 (3 asked for)",
            "min.insync.replicas 1 (2 asked for)",
        )),
        TopicReport("out", created=False, partitions=12),
    ]
    assert admin.created == []
    assert admin.topics["in"] == (6, 1, "1")


def test_min_insync_replicas_defaults_from_the_replication_factor() -> None:
    """Unset, min.insync.replicas is 2 with three replicas or more and 1 below; the topics of
    one replica leave it to the broker; a value that is set is used as given."""
    assert Settings(topic_replication_factor=3).min_insync_replicas() == 2
    assert Settings(topic_replication_factor=5).min_insync_replicas() == 2
    assert Settings(topic_replication_factor=2).min_insync_replicas() == 1
    assert topic_specs(Settings(topic_replication_factor=1))[0].min_insync_replicas is None
    assert topic_specs(Settings(topic_replication_factor=3))[0].min_insync_replicas == 2
    set_three = Settings(topic_replication_factor=3, topic_min_insync_replicas=3)
    assert topic_specs(set_three)[0].min_insync_replicas == 3


def test_min_insync_replicas_above_the_replication_factor_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """TOPIC_MIN_INSYNC_REPLICAS above TOPIC_REPLICATION_FACTOR (every write would be refused)
    is one line and exit 2, before any broker is contacted."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("TOPIC_REPLICATION_FACTOR", "2")
    monkeypatch.setenv("TOPIC_MIN_INSYNC_REPLICAS", "3")
    assert cli.main(["topics"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["turnflow: min.insync.replicas 3 is more than the replication factor 2: "
                   "every write would be refused"]


def test_too_few_brokers_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``turnflow topics`` with a replication factor the cluster cannot hold prints one line
    naming both numbers and exits 2."""

    async def refused(*_: object, **__: object) -> list[TopicReport]:
        raise TooFewBrokersError("replication factor 3 needs 3 brokers; the cluster has 1")

    monkeypatch.setattr(topics_command, "ensure_topics", refused)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("TOPIC_REPLICATION_FACTOR", "3")
    assert cli.main(["topics"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        "turnflow: cannot create topics: replication factor 3 needs 3 brokers; the cluster has 1"
    ]
    assert captured.out == ""
