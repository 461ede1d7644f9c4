"""The Perfetto protobuf trace: ``TracePacket`` messages of the ``perfetto`` package's protos, streamed.

A trace file is a ``Trace`` message, i.e. a concatenation of its field 1 (``packet``), each a length-delimited
``TracePacket``: so packets are written one rank at a time and never held together. Every rank is one packet
sequence (``trusted_packet_sequence_id`` = rank + 2) whose event names and categories are interned; its process is a
``TrackDescriptor`` with a ``ProcessDescriptor`` (pid, name, labels), its tracks ``TrackDescriptor``s under it in
display order. Slices are ``TYPE_SLICE_BEGIN`` / ``TYPE_SLICE_END`` pairs (nested properly: lanes), zero-length
ones and Kineto instants ``TYPE_INSTANT``; timestamps are absolute ns on the default trace clock. Flows are
``flow_ids`` on the two slices they join. The findings are global tracks on sequence 1; the run's metadata (findings,
fixes, clock alignment) is a ``ChromeEventBundle`` metadata packet named ``workbench`` (JSON) at the end.
"""

from __future__ import annotations

from typing import Any, BinaryIO

import orjson

from workbench.export.model import SLICE, FindingsTrace, RankTrace

#: Packet sequence of the findings and the metadata; rank R's is R + 2.
FINDINGS_SEQUENCE = 1
#: Track uuid of the "workbench findings" group; its tracks are FINDINGS_UUID + 1 + i.
FINDINGS_UUID = 1 << 32
SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2


def _pb() -> Any:
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError as exc:  # pragma: no cover - the dependency is declared
        raise ImportError("writing a Perfetto protobuf trace needs the 'perfetto' package "
                          "(pip install perfetto), or write Chrome JSON (-o run.json.gz)") from exc
    return perfetto_trace_pb2


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def frame_packet(data: bytes) -> bytes:
    """One serialized ``TracePacket`` as a ``Trace.packet`` field (tag 1, length-delimited)."""
    return b"\x0a" + _varint(len(data)) + data


def process_uuid(rank: int) -> int:
    return (rank + 2) << 32


def emission_order(rt: RankTrace | FindingsTrace, kinds: list[int] | None = None,
                   depths: list[int] | None = None) -> list[tuple[int, int, int, int]]:
    """``(ts, phase, tie, slice index)`` in the order the events go out: by time; at one instant ends (innermost
    first) before instants before begins (outermost first). ``phase``: 0 end, 1 instant, 2 begin."""
    out: list[tuple[int, int, int, int]] = []
    n = len(rt.starts)
    kinds = kinds if kinds is not None else [SLICE] * n
    depths = depths if depths is not None else [0] * n
    for i, (s, e, k, d) in enumerate(zip(rt.starts, rt.ends, kinds, depths)):
        if k == SLICE:
            out.append((s, 2, d, i))
            out.append((e, 0, -d, i))
        else:
            out.append((s, 1, 0, i))
    out.sort()
    return out


def _annotations(te: Any, args: dict[str, Any] | None) -> None:
    if not args:
        return
    add = te.debug_annotations.add
    for k, v in args.items():
        if type(v) is int and -(1 << 63) <= v < (1 << 63):
            add(name=k, int_value=v)
            continue
        a = add()
        a.name = k
        if isinstance(v, bool):
            a.bool_value = v
        elif isinstance(v, int) and -(1 << 63) <= v < (1 << 63):
            a.int_value = v
        elif isinstance(v, float):
            a.double_value = v
        elif isinstance(v, str):
            a.string_value = v
        else:
            a.string_value = orjson.dumps(v, default=str).decode()


class PerfettoWriter:
    """Writes packets to ``fh`` as ranks come; :meth:`close` adds the metadata packet."""

    def __init__(self, fh: BinaryIO) -> None:
        self.pb = _pb()
        self.fh = fh
        self.bytes = 0
        self.packets = 0

    def _write(self, packets: list[Any]) -> None:
        blob = b"".join(frame_packet(p if isinstance(p, bytes) else p.SerializeToString()) for p in packets)
        self.fh.write(blob)
        self.bytes += len(blob)
        self.packets += len(packets)

    def rank(self, rt: RankTrace) -> None:
        """One rank's process, tracks and events (one packet sequence)."""
        pb = self.pb
        seq = rt.rank + 2
        puuid = process_uuid(rt.rank)
        TD, TE, TP = pb.TrackDescriptor, pb.TrackEvent, pb.TracePacket
        packets = [TP(trusted_packet_sequence_id=seq, sequence_flags=SEQ_INCREMENTAL_STATE_CLEARED,
                      track_descriptor=TD(uuid=puuid, child_ordering=TD.EXPLICIT, process=pb.ProcessDescriptor(
                          pid=rt.pid, process_name=rt.name, process_labels=rt.labels)))]
        for k, name in enumerate(rt.tracks):
            packets.append(TP(trusted_packet_sequence_id=seq, track_descriptor=TD(
                uuid=puuid + k + 1, parent_uuid=puuid, name=name, sibling_order_rank=k)))
        names: dict[str, int] = {}
        cats: dict[str, int] = {}
        begin, instant = TE.TYPE_SLICE_BEGIN, TE.TYPE_INSTANT
        # an end differs from the other ends of its track only by its timestamp: its other fields are serialized
        # once per track and the timestamp field (8, varint) put before them (field order is free in protobuf)
        ends = [TP(trusted_packet_sequence_id=seq, sequence_flags=SEQ_NEEDS_INCREMENTAL_STATE, track_event=TE(
            type=TE.TYPE_SLICE_END, track_uuid=puuid + k + 1)).SerializeToString() for k in range(len(rt.tracks))]
        for ts, phase, _, i in emission_order(rt, rt.kinds, rt.depths):
            track = puuid + rt.track[i] + 1
            if phase == 0:
                packets.append(b"\x40" + _varint(ts) + ends[rt.track[i]])
                continue
            p = TP(timestamp=ts, trusted_packet_sequence_id=seq, sequence_flags=SEQ_NEEDS_INCREMENTAL_STATE)
            name, cat = rt.names[i], rt.cats[i]
            nid = names.get(name)
            if nid is None:
                nid = names[name] = len(names) + 1
                p.interned_data.event_names.add(iid=nid, name=name)
            cid = cats.get(cat)
            if cid is None:
                cid = cats[cat] = len(cats) + 1
                p.interned_data.event_categories.add(iid=cid, name=cat)
            te = p.track_event
            te.type = begin if phase == 2 else instant
            te.track_uuid = track
            te.name_iid = nid
            te.category_iids.append(cid)
            if rt.flows[i]:
                te.flow_ids.extend(rt.flows[i])
            _annotations(te, rt.args[i])
            packets.append(p)
            if len(packets) >= 4096:
                self._write(packets)
                packets = []
        self._write(packets)

    def findings(self, ft: FindingsTrace) -> None:
        """The findings group and its tracks (sequence 1)."""
        pb = self.pb
        TD, TE, TP = pb.TrackDescriptor, pb.TrackEvent, pb.TracePacket
        seq = FINDINGS_SEQUENCE
        packets = [TP(trusted_packet_sequence_id=seq, sequence_flags=SEQ_INCREMENTAL_STATE_CLEARED,
                      track_descriptor=TD(uuid=FINDINGS_UUID, name="workbench findings",
                                          child_ordering=TD.EXPLICIT))]
        for k, (name, parent) in enumerate(ft.tracks):
            packets.append(TP(trusted_packet_sequence_id=seq, track_descriptor=TD(
                uuid=FINDINGS_UUID + k + 1, name=name, sibling_order_rank=k, child_ordering=TD.EXPLICIT,
                parent_uuid=FINDINGS_UUID if parent is None else FINDINGS_UUID + parent + 1)))
        for ts, phase, _, i in emission_order(ft):
            te = TE(type=TE.TYPE_SLICE_END if phase == 0 else TE.TYPE_SLICE_BEGIN,
                    track_uuid=FINDINGS_UUID + ft.track[i] + 1)
            if phase == 2:
                te.name = ft.names[i]
                te.categories.append("workbench.finding")
                _annotations(te, ft.args[i])
            packets.append(TP(timestamp=ts, trusted_packet_sequence_id=seq, track_event=te))
        self._write(packets)

    def close(self, metadata: dict[str, Any]) -> None:
        """The run's metadata as one ``ChromeEventBundle`` metadata entry named ``workbench`` (JSON)."""
        pb = self.pb
        bundle = pb.ChromeEventBundle(metadata=[pb.ChromeMetadata(
            name="workbench", json_value=orjson.dumps(metadata, option=orjson.OPT_NON_STR_KEYS,
                                                      default=str).decode())])
        self._write([pb.TracePacket(trusted_packet_sequence_id=FINDINGS_SEQUENCE, chrome_events=bundle)])


__all__ = ["FINDINGS_SEQUENCE", "FINDINGS_UUID", "PerfettoWriter", "emission_order", "frame_packet", "process_uuid"]
