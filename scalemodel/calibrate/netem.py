"""An emulated cluster on one Linux machine: network namespaces, veth pairs, a bridge, tc.

:class:`EmulatedCluster` builds ``hosts`` network namespaces (``<prefix>-h0``, ...), each
joined by a veth pair to a bridge that lives in its own namespace (``<prefix>-sw``, the
"switch"), so nothing in the machine's own network namespace changes. Every link is
rate-limited in both directions with a token-bucket filter (``tc qdisc ... tbf``): the
host's side shapes what the host sends, the switch's side what it receives. Commands run
inside a host with ``ip netns exec``.

It needs root and ``ip`` / ``tc`` from iproute2; :func:`netns_available` says whether this
machine allows it, and why not.

**Names.** Inside a namespace the machine's DNS server is unreachable, so a reverse lookup
of a host's address (``getnameinfo``, which c10d's TCP store makes for every connection,
on the IPv4-mapped IPv6 address ``::ffff:<address>``) fails with ``EAI_AGAIN`` (-3: "The hostname of the client socket cannot be retrieved.
err=-3"). Each namespace therefore gets its own ``/etc/netns/<namespace>/hosts`` (which
``ip netns exec`` mounts over ``/etc/hosts``) naming every host's address, in both forms,
and an empty ``resolv.conf``; both go with the namespace.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from ..exceptions import CalibrationError, InvalidParameterError
from ..units import parse_bandwidth

__all__ = ["EmulatedCluster", "netns_available"]

_NETNS_ETC = "/etc/netns"   # ip netns exec mounts /etc/netns/<name>/* over /etc/*


def _run(args, check=True):
    proc = subprocess.run(args, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise CalibrationError(f"`{' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc


def netns_available() -> tuple:
    """``(True, "")`` when namespaces and tc can be used here, else ``(False, reason)``."""
    if os.name != "posix" or not os.path.exists("/proc/self/ns/net"):
        return False, "needs Linux network namespaces"
    if os.geteuid() != 0:
        return False, "needs root (ip netns add, tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"needs `{tool}` from iproute2"
    probe = f"scalemodel-probe-{os.getpid()}"
    proc = _run(["ip", "netns", "add", probe], check=False)
    if proc.returncode != 0:
        return False, f"`ip netns add` is not allowed here: {proc.stderr.strip()}"
    try:
        proc = _run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root",
                     "tbf", "rate", "100mbit", "burst", "64kb", "latency", "50ms"], check=False)
        if proc.returncode != 0:
            return False, f"`tc qdisc add ... tbf` is not allowed here: {proc.stderr.strip()}"
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    return True, ""


class EmulatedCluster:
    """Hosts in network namespaces behind one rate-limited bridge.

    Use as a context manager; it tears everything down on exit, also after an error.

    Parameters
    ----------
    hosts : int
        Number of hosts (namespaces) [-].
    rate : float or str
        Initial link rate of every link, each direction [bits/s] (``"500Mbit/s"`` works).
    prefix : str
        Namespace and interface name prefix (short: interface names have 15 characters) [-].
    subnet : str
        First three octets of the hosts' /24 network; host ``i`` is ``<subnet>.<i + 1>`` [-].
    delay : float
        One-way delay added on each link with netem, 0 for none [s].
    queue : float
        Longest queueing delay the token bucket allows before it drops, a shallow
        switch buffer by default [s].
    """

    def __init__(self, hosts=2, rate="1Gbit/s", *, prefix="smc", subnet="10.77.0",
                 delay=0.0, queue=20e-3):
        if isinstance(hosts, bool) or not isinstance(hosts, int) or not 1 <= hosts <= 200:
            raise InvalidParameterError("hosts", hosts, "an integer from 1 to 200")
        if not (isinstance(prefix, str) and prefix.isalnum() and len(prefix) <= 6):
            raise InvalidParameterError("prefix", prefix, "up to 6 letters or digits")
        self.hosts, self.prefix, self.subnet = hosts, prefix, subnet
        self.rate = parse_bandwidth(rate)
        self.delay = float(delay)
        self.queue = float(queue)
        self.switch = f"{prefix}-sw"
        self.namespaces = [f"{prefix}-h{i}" for i in range(hosts)]
        self.addresses = [f"{subnet}.{i + 1}" for i in range(hosts)]

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self):
        ok, why = netns_available()
        if not ok:
            raise CalibrationError(f"cannot build an emulated cluster: {why}")
        self.teardown()  # leftovers of an interrupted run
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc):
        self.teardown()

    def _build(self):
        sw = self.switch
        _run(["ip", "netns", "add", sw])
        _run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", sw, "link", "set", "br0", "up"])
        for i, ns in enumerate(self.namespaces):
            _run(["ip", "netns", "add", ns])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            host_if, sw_if = f"{self.prefix}h{i}", f"{self.prefix}s{i}"
            _run(["ip", "link", "add", host_if, "netns", ns, "type", "veth", "peer", "name",
                  sw_if, "netns", sw])
            _run(["ip", "-n", sw, "link", "set", sw_if, "master", "br0"])
            _run(["ip", "-n", sw, "link", "set", sw_if, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.addresses[i]}/24", "dev", host_if])
            _run(["ip", "-n", ns, "link", "set", host_if, "up"])
        self._write_names()
        self.set_rate(self.rate)

    def _write_names(self):
        """``/etc/netns/<ns>/hosts`` and an empty ``resolv.conf`` for every host: its
        addresses resolve both ways from files, with no DNS (see the module notes)."""
        # c10d's store listens on IPv6 too: a peer shows up as ::ffff:<its IPv4 address>
        table = "127.0.0.1\tlocalhost\n::1\tlocalhost\n" + "".join(
            f"{addr}\t{ns}\n::ffff:{addr}\t{ns}\n"
            for addr, ns in zip(self.addresses, self.namespaces))
        for ns in self.namespaces:
            folder = os.path.join(_NETNS_ETC, ns)
            os.makedirs(folder, exist_ok=True)
            for name, text in (("hosts", table), ("resolv.conf", "")):
                with open(os.path.join(folder, name), "w") as fh:
                    fh.write(text)

    def teardown(self):
        """Delete the namespaces (and with them the links); safe to call twice."""
        for ns in [*self.namespaces, self.switch]:
            _run(["ip", "netns", "del", ns], check=False)
            shutil.rmtree(os.path.join(_NETNS_ETC, ns), ignore_errors=True)

    # ------------------------------------------------------------------ shaping
    def links(self):
        """``(namespace, interface)`` of both ends of every link."""
        for i, ns in enumerate(self.namespaces):
            yield ns, f"{self.prefix}h{i}"
            yield self.switch, f"{self.prefix}s{i}"

    def set_rate(self, rate, delay=None):
        """Shape every link, both directions, to ``rate``.

        Parameters
        ----------
        rate : float or str
            Line rate [bits/s].
        delay : float, optional
            One-way delay per link [s]; the cluster's ``delay`` when omitted.
        """
        self.rate = parse_bandwidth(rate)
        delay = self.delay if delay is None else float(delay)
        # the bucket holds 1 ms of traffic, at least 64 KiB (one TSO segment)
        burst = max(65536, int(self.rate / 8 * 1e-3))
        for ns, dev in self.links():
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                 check=False)
            if delay > 0:
                _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root",
                      "handle", "1:", "netem", "delay", f"{delay * 1e6:.0f}us"])
                parent = ["parent", "1:1", "handle", "10:"]
            else:
                parent = ["root"]
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, *parent, "tbf",
                  "rate", f"{self.rate:.0f}bit", "burst", str(burst), "latency",
                  f"{self.queue * 1e3:g}ms"])

    def command(self, host, args):
        """The argument list that runs ``args`` inside host ``host``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[host], *args]
