"""The end-to-end benchmark's WAL and database bytes per turn come from the server's own
counters: both move when rows are written, and an unreachable server gives none."""

from __future__ import annotations

import asyncpg

from bench.e2e_bench import _wal_and_size
from store.urls import plain_url


async def test_writing_rows_moves_the_wal_and_the_database_size(database_url: str) -> None:
    before = await _wal_and_size(database_url)
    assert before is not None and before[0] > 0 and before[1] > 0
    connection = await asyncpg.connect(plain_url(database_url))
    try:
        await connection.execute("CREATE TABLE bench_disk_probe (v text)")
        await connection.execute(
            "INSERT INTO bench_disk_probe SELECT repeat('x', 200) FROM generate_series(1, 20000)")
    finally:
        await connection.execute("DROP TABLE IF EXISTS bench_disk_probe")
        await connection.close()
    after = await _wal_and_size(database_url)
    assert after is not None
    assert after[0] - before[0] > 20000 * 200  # every row went through the WAL


async def test_a_server_out_of_reach_gives_no_figures() -> None:
    assert await _wal_and_size("postgresql://nobody@127.0.0.1:1/none") is None


def test_a_row_s_bytes_are_printed_as_far_as_they_are_known() -> None:
    from bench.e2e_bench import RunResult, _bytes_text

    row = RunResult(latency_ms=0, partitions=8, inputs=10, turns_per_s=1.0, cpu_ms_per_turn=0.5,
                    paced_rate=1.0, paced_inputs=1, p50_ms=1.0, p95_ms=1.0, p99_ms=1.0)
    assert _bytes_text(row) == ""
    row.wal_bytes_per_turn, row.db_bytes_per_turn = 5222.4, 4096.0
    row.kafka_in_bytes_per_turn, row.kafka_out_bytes_per_turn = 98.0, 402.4
    assert _bytes_text(row) == (", WAL 5.1 KB, database 4.0 KB; Kafka records in 98 B,"
                                " replies out 402 B")
