#!/usr/bin/env python3
"""Lock-step replay of Megatron-LM's 2021 pipeline schedules (docs/paper.md).

Megatron-LM of April 2021 (megatron/schedules.py, megatron/p2p_communication.py) exchanges tensors
between pipeline ranks with batched, blocking sends/receives followed by torch.cuda.synchronize():
a rank's exchange completes only when every peer it sends to or receives from has posted the
matching operation. This script re-implements that control flow for the interleaved schedule
(v = 1 gives 1F1B) with per-chunk forward/backward costs, a transfer time per message and a fixed
cost per exchange, and compares the iteration with ptdp's closed form m*T_max*(1 + (p-1)/(v m)).

Usage: lockstep_2021.py            (the 76B row's costs, rounded from `ptdp plan --fix`)
       lockstep_2021.py P V M      (equal costs, free communication: the bubble vs (p-1)/(v m))
"""
import sys
from collections import defaultdict


def program(p, r, v, m, F, B, C):
    """Per rank list of actions: ('c', dur) or ('x', [ops]) where op = (chan, idx_in_chan role)
    chan: ('f', src) activation from src to src+1 (mod p); ('b', src) gradient from src to src-1."""
    acts = []
    nmb = m * v
    if m == p: warm = nmb; allwarm = True
    else:
        warm = min((p - r - 1) * 2 + (v - 1) * p, nmb); allwarm = False
    rem = nmb - warm
    def chunk(k, fwd):
        c = (k % (p * v)) // p
        return c if fwd else v - c - 1
    first = lambda c: r == 0 and c == 0
    last = lambda c: r == p - 1 and c == v - 1
    def xchg(send_next, send_prev, recv_prev, recv_next):
        ops = []
        if send_prev: ops.append(('send', 'b', r))
        if recv_prev: ops.append(('recv', 'f', (r - 1) % p))
        if send_next: ops.append(('send', 'f', r))
        if recv_next: ops.append(('recv', 'b', (r + 1) % p))
        if ops: acts.append(('x', ops))
        acts.append(('c', C))  # sync + gather cost
    # initial recv_forward (chunk 0)
    if r != 0: xchg(False, False, True, False)
    for k in range(warm):
        c = chunk(k, True)
        acts.append(('c', F[c]))
        nc = chunk(k + 1, True)
        recv_prev = not (r == 0 and nc == 0)
        if k == nmb - 1: recv_prev = False
        send = not last(c)
        if k == warm - 1 and not allwarm:
            recv_next = r != p - 1
            xchg(send, False, recv_prev, recv_next)
        else:
            xchg(send, False, recv_prev, False)
    for k in range(rem):
        fk = k + warm
        cf = chunk(fk, True); acts.append(('c', F[cf]))
        cb = chunk(k, False); acts.append(('c', B[cb]))
        send_next = not last(cf)
        send_prev = not first(cb)
        recv_prev = True
        if r == 0:
            if chunk(fk - (p - 1), True) == v - 1: recv_prev = False
        recv_next = True
        if r == p - 1:
            if chunk(k - (p - 1), False) == 0: recv_next = False
        if k == rem - 1: recv_prev = False
        xchg(send_next, send_prev, recv_prev, recv_next)
    if allwarm:
        xchg(False, False, False, r != p - 1)
    for k in range(rem, nmb):
        cb = chunk(k, False); acts.append(('c', B[cb]))
        nb = chunk(k + 1, False)
        recv_next = True
        if r == p - 1 and nb == v - 1: recv_next = False
        if k == nmb - 1: recv_next = False
        xchg(False, not first(cb), False, recv_next)
    return acts

def sim(p, v, m, F, B, X, C, Fl, Bl):
    # patch: per-rank costs (last rank chunk v-1 heavier)
    progs = []
    for r in range(p):
        Fr = list(F); Br = list(B)
        if r == p - 1: Fr[v-1] += Fl; Br[v-1] += Bl
        progs.append(program(p, r, v, m, Fr, Br, C))
    sends = defaultdict(list); recvs = defaultdict(list)
    ptr = [0]*p; t = [0.0]*p; pending = [None]*p; cs = defaultdict(int); cr = defaultdict(int); busy=[0.0]*p
    while True:
        prog = False
        for r in range(p):
            while ptr[r] < len(progs[r]):
                kind, a = progs[r][ptr[r]]
                if kind == 'c':
                    t[r] += a; busy[r] += a; ptr[r] += 1; prog = True; continue
                if pending[r] is None:
                    ops = []
                    for role, ch, src in a:
                        key = (ch, src)
                        if role == 'send': i = cs[key]; cs[key] += 1; sends[key].append(t[r])
                        else: i = cr[key]; cr[key] += 1; recvs[key].append(t[r])
                        ops.append((role, key, i))
                    pending[r] = (t[r], ops); prog = True
                post, ops = pending[r]; fin = post; ok = True
                # sends out of one NIC share it: count sends in group
                nsend = sum(1 for o in ops if o[0]=='send'); nrecv = len(ops)-nsend
                for role, key, i in ops:
                    other = recvs[key] if role == 'send' else sends[key]
                    if len(other) <= i: ok = False; break
                    fin = max(fin, other[i])
                if not ok: break
                t[r] = fin + X * max(nsend, nrecv, 1); pending[r] = None; ptr[r] += 1; prog = True
        if all(ptr[r] == len(progs[r]) for r in range(p)): break
        if not prog: raise SystemExit('deadlock')
    return max(t), busy


def main():
    if len(sys.argv) == 4:
        p, v, m = map(int, sys.argv[1:4])
        total, busy = sim(p, v, m, [1.0] * v, [3.0] * v, 0.0, 0.0, 0.0, 0.0)
        ideal = max(busy)
        print(f"p={p} v={v} m={m}: bubble {(total - ideal) / ideal:.4f}, "
              f"formula {(p - 1) / (v * m):.4f}")
        return
    # 76B: t=8, p=4, v=3, m=28; per chunk (5 layers) forward 39.4 ms, backward with recompute
    # 118 ms (TP all-reduces included); the head adds 2.5 / 5 ms to the last rank's last chunk;
    # 0.44 ms per 10.5 MB HDR transfer, 0.32 ms scatter/gather all-gather per exchange.
    p, v, m = 4, 3, 28
    F, B, X, C, Fl, Bl = [0.0394] * v, [0.118] * v, 0.00044, 0.00032, 0.0025, 0.005
    total, _ = sim(p, v, m, F, B, X, C, Fl, Bl)
    tmax = sum(F) + sum(B) + Fl + Bl + 2 * v * (X + C)
    closed = m * tmax * (1 + (p - 1) / (v * m))
    print(f"76B lock-step {total:.3f} s, closed form {closed:.3f} s, ratio {total / closed:.4f}")


if __name__ == "__main__":
    main()
