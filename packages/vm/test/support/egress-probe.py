# Runs network probes from inside the guest (egress.vm.test.ts) and prints one outcome per probe,
# as JSON, in order. Probes run in parallel with short timeouts. Usage: egress-probe.py '<json>'
# with a list of {"kind": "tcp"|"udp"|"dns", ...}; outcomes:
#   tcp: connect-failed:<errno> | connect-timeout | silent (connected, nothing came back)
#        | reset | eof | recv:<text>
#   udp: send-failed:<errno> | no-reply | reply:<text>
#   dns: no-reply | rcode=<n> answers=<a,b>
import errno
import json
import socket
import struct
import sys
from concurrent.futures import ThreadPoolExecutor


def err(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if getattr(e, "errno", None) else type(e).__name__


def family(p):
    return socket.AF_INET6 if p.get("family") == 6 else socket.AF_INET


def address(p):
    if p.get("family") == 6 and "%" in p["host"]:
        host, scope = p["host"].split("%")
        return (host, p["port"], 0, socket.if_nametoindex(scope))
    return (p["host"], p["port"])


def tcp(p):
    try:
        s = socket.socket(family(p), socket.SOCK_STREAM)
    except OSError as e:
        return "socket-failed:" + err(e)
    s.settimeout(p.get("timeout", 4))
    try:
        try:
            s.connect(address(p))
        except socket.timeout:
            return "connect-timeout"
        except OSError as e:
            return "connect-failed:" + err(e)
        try:
            if p.get("send"):
                s.sendall(p["send"].encode("latin1"))
            data = s.recv(512)
            return "recv:" + data.decode("latin1") if data else "eof"
        except socket.timeout:
            return "silent"
        except ConnectionResetError:
            return "reset"
        except OSError as e:
            return "error:" + err(e)
    finally:
        s.close()


def exchange(p, payload):
    try:
        s = socket.socket(family(p), socket.SOCK_DGRAM)
    except OSError as e:
        return None, "socket-failed:" + err(e)
    s.settimeout(p.get("timeout", 3))
    try:
        try:
            s.sendto(payload, address(p))
        except OSError as e:
            return None, "send-failed:" + err(e)
        try:
            data, _ = s.recvfrom(4096)
            return data, "reply"
        except socket.timeout:
            return None, "no-reply"
        except OSError as e:
            return None, "error:" + err(e)
    finally:
        s.close()


def udp(p):
    data, outcome = exchange(p, p.get("send", "ping").encode("latin1"))
    return outcome + (":" + data.decode("latin1") if data else "")


def dns(p):
    qtype = {"A": 1, "AAAA": 28, "TXT": 16}[p.get("type", "A")]
    question = b"".join(bytes([len(label)]) + label.encode() for label in p["name"].split("."))
    question += b"\0" + struct.pack(">HH", qtype, 1)
    query = struct.pack(">HHHHHH", 0x5A5A, 0x0100, 1, 0, 0, 0) + question
    data, outcome = exchange({**p, "host": p["server"], "port": p.get("port", 53)}, query)
    if data is None:
        return outcome
    rcode = data[3] & 0x0F
    count = struct.unpack(">H", data[6:8])[0]
    offset = 12 + len(question)
    answers = []
    for _ in range(count):
        if data[offset] & 0xC0 == 0xC0:
            offset += 2
        else:
            while data[offset]:
                offset += data[offset] + 1
            offset += 1
        rtype, _, _, length = struct.unpack(">HHIH", data[offset : offset + 10])
        rdata = data[offset + 10 : offset + 10 + length]
        offset += 10 + length
        if rtype == 1:
            answers.append(socket.inet_ntop(socket.AF_INET, rdata))
        elif rtype == 28:
            answers.append(socket.inet_ntop(socket.AF_INET6, rdata))
        else:
            answers.append("type%d" % rtype)
    return "rcode=%d answers=%s" % (rcode, ",".join(answers))


probes = json.loads(sys.argv[1])
with ThreadPoolExecutor(max_workers=16) as pool:
    outcomes = list(pool.map(lambda p: {"tcp": tcp, "udp": udp, "dns": dns}[p["kind"]](p), probes))
print(json.dumps(outcomes))
