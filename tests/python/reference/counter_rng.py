"""batchd's counter-based random numbers (workloads/counter_rng.h), written
again from their published definitions for the references that re-derive
what batchd draws (tests/soak_reference.py: the epoch permutation and the
synthetic payload; fastmri_ref.py: the train masks): SplitMix64's
finaliser (Steele, Lea and Flood) and Philox4x32-10 (Salmon et al.).
Imports nothing of batchd."""

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1


def splitmix64_finaliser(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def philox4x32_10(ctr, key):
    """The four 32-bit words of Philox4x32 with 10 rounds at counter `ctr`
    (four 32-bit words) under the 64-bit `key`."""
    c = list(ctr)
    k0, k1 = key & M32, key >> 32
    for _ in range(10):
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & M32, p1 & M32,
             ((p0 >> 32) ^ c[3] ^ k1) & M32, p0 & M32]
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c
