"""Fresh randomness from the host at every attach.

A guest resumed from saved memory carries the kernel CRNG state it had when it was saved, and
several instances cloned from one template's memory carry the same one. The guest kernel (Debian's
cloud kernel) has no vmgenid driver that would notice the copy, so the host sends random bytes in
its hello; they are written into the kernel's input pool and the CRNG is reseeded from it at once
(RNDRESEEDCRNG, root only). Processes that seeded their own generators before the save (Python's
`random`, OpenSSL DRBGs inside running services) are not reached by this.
"""

from __future__ import annotations

import fcntl

#: ioctl RNDRESEEDCRNG: _IO('R', 0x07), reseed the CRNG from the input pool now (Linux >= 4.17).
RNDRESEEDCRNG = 0x5207
#: Longest entropy field the host sends, in hex digits (64 bytes).
ENTROPY_MAX_HEX = 128


def mix_host_entropy(value: object, device: str = "/dev/urandom") -> bool:
    """Writes the host's bytes (hex) into the kernel's pool and reseeds its CRNG; True when the
    kernel took both. Anything but bounded hex is ignored; so are a missing device or rights."""
    if not isinstance(value, str) or not 0 < len(value) <= ENTROPY_MAX_HEX:
        return False
    try:
        data = bytes.fromhex(value)
    except ValueError:
        return False
    try:
        with open(device, "wb", buffering=0) as pool:
            pool.write(data)
            fcntl.ioctl(pool.fileno(), RNDRESEEDCRNG)
    except OSError:
        return False
    return True
