"""The routing rule for a shared tier agrees with the Rust client and docs/deploy.md."""

from hookd_client.route import pick, score

THREE = ["hookd-0", "hookd-1", "hookd-2"]


def test_the_documented_values():
    assert score("hookd-0", "endpoint:orders") == 0x2E684A40D8F00D3C
    assert pick("queue:jobs", THREE) == "hookd-0"
    assert pick("endpoint:orders", THREE) == "hookd-2"
    assert pick("endpoint:x", []) is None


def test_order_does_not_matter_and_removal_moves_only_the_removed():
    counts = dict.fromkeys(THREE, 0)
    for i in range(3000):
        d = f"endpoint:e{i}"
        p = pick(d, THREE)
        assert p == pick(d, reversed(THREE))
        counts[p] += 1
        if p != "hookd-2":
            assert pick(d, THREE[:2]) == p, f"{d} moved although its replica stayed"
    assert all(800 <= c < 1200 for c in counts.values()), counts


def test_non_ascii_names_hash_their_utf8_bytes():
    # The Rust client hashes UTF-8 bytes; so must every other client.
    assert score("hookd-é", "queue:ü") == 0xD2B33749D7FB175F
