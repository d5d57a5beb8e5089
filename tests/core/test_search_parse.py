"""Parsing of --min-headroom, --tokens, --gpus and comma lists."""

from __future__ import annotations

import pytest

from autopar.errors import AutoparError
from autopar.parse import parse_count, parse_gib, parse_gpu_counts, parse_list


def test_parse_gib_units():
    assert parse_gib("4GiB") == 4.0
    assert parse_gib("4 gib") == 4.0
    assert parse_gib("4") == 4.0
    assert parse_gib("512MiB") == 0.5
    # 4 GB = 4e9 bytes = 4e9 / 2^30 GiB = 3.7253 GiB
    assert parse_gib("4GB") == pytest.approx(3.72529, rel=1e-5)
    assert parse_gib(None) == 0.0
    with pytest.raises(AutoparError, match="min-headroom"):
        parse_gib("four GiB")
    with pytest.raises(AutoparError):
        parse_gib("4 parsecs")


def test_parse_count_suffixes():
    assert parse_count("1T") == 1e12
    assert parse_count("300B") == 3e11
    assert parse_count("2.5e12") == 2.5e12
    assert parse_count("15m") == 15e6
    assert parse_count(None) is None
    with pytest.raises(AutoparError, match="tokens"):
        parse_count("lots")
    with pytest.raises(AutoparError, match="positive"):
        parse_count("0")


def test_parse_gpu_counts():
    assert parse_gpu_counts("64") == [64]
    assert parse_gpu_counts("64..1024") == [64, 128, 256, 512, 1024]
    assert parse_gpu_counts("64..256:64") == [64, 128, 192, 256]
    assert parse_gpu_counts("128,64,64") == [64, 128]
    assert parse_gpu_counts("4") == [4]  # less than a node is allowed
    with pytest.raises(AutoparError, match="multiple of 8"):
        parse_gpu_counts("12")
    with pytest.raises(AutoparError):
        parse_gpu_counts("100..10")
    with pytest.raises(AutoparError, match="no power of two"):
        parse_gpu_counts("65..100")
    with pytest.raises(AutoparError):
        parse_gpu_counts("sixty")


def test_parse_list():
    assert parse_list("H100-SXM, H200,,H100-SXM", "gpu") == ["H100-SXM", "H200"]
    with pytest.raises(AutoparError, match="gpu"):
        parse_list(" , ", "gpu")


def test_gpu_counts_refuse_non_ascii_digits_in_one_line():
    # '²'.isdigit() is True but int('²') raises ValueError: found by tests/cli/test_fuzz_inputs.py
    for text in ("²", "8,²", "³2"):
        with pytest.raises(AutoparError, match="expected N"):
            parse_gpu_counts(text)
