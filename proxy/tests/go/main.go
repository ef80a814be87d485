// Command proxyclients runs franz-go (kgo, kadm) through the tombstone-crypt
// proxy, checked beside it with Go's AES-GCM (tink.go).
//
//	proxyclients PHASE PROXY BROKER PREFIX VALUE_KEYSET KEY_KEYSET [CASES]
//
// The phases and cases are those of the Java client (proxy/tests/java), each
// topic PREFIX + a name:
//
//   - clients runs CASES (comma-separated, default all): idempotent (kgo's
//     idempotent producer, gzip, writes keyed and unkeyed records, an empty
//     key, tombstones and empty values to the two partitions of idempotent;
//     beside the proxy every value is a ciphertext that decrypts to what was
//     sent, every key a ciphertext of the key keyset, every tombstone null,
//     every empty value a 33-byte ciphertext), classic and consumer (a
//     consumer group through the proxy with the classic protocol, and with
//     KIP-848's, kgo.ServerSideBalancer: reads exactly what was sent,
//     commits, and the group and its committed offsets read back through
//     kadm), transactions (a transactional producer, lz4: committed, aborted,
//     committed; through the proxy read_committed reads the committed records
//     only, read_uncommitted all three as written, decrypted; beside it all
//     are sealed).
//   - compaction-write, then the test compacts, then compaction-read:
//     several versions of five keys on a compacted topic, a tombstone and an
//     empty value last of two of them; once compacted, one record per key
//     through the proxy (its last) and one per key beside it.
//   - rotation-before (one key in KEY_KEYSET) writes k1 and k2;
//     rotation-after (KEY_KEYSET rotated: two enabled keys) writes a new k1
//     and deletes k2 in a transaction that aborts (both still read as before,
//     nothing deleted on the broker, though the aborted batch held the older
//     forms' tombstones), then in one that commits (k1 has its new value, k2
//     is deleted, no older form is left live on the broker); the test
//     compacts, then rotation-compacted: one record per key form, one live.
//
// Prints one line per case and {"ok": true, ...} last; exits 1 with
// "FAILED: " and the first difference on stderr.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const wait = 60 * time.Second

type rec struct {
	partition  int32
	key, value []byte
}

type got struct {
	partition  int32
	offset     int64
	key, value []byte
}

type run struct {
	proxy, broker, prefix string
	values, keys          keyset
}

func failf(format string, args ...any) error {
	return fmt.Errorf(format, args...)
}

func b(s string) []byte { return []byte(s) }

func show(v []byte) string {
	if v == nil {
		return "null"
	}
	s := string(v)
	if len(s) > 24 {
		s = s[:24] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// records returns keyed and unkeyed records, an empty key, tombstones and
// empty values.
func records(tag string, n int) []rec {
	var out []rec
	for i := 0; i < n; i++ {
		var key []byte
		switch {
		case i%4 == 3:
		case i%11 == 5:
			key = []byte{}
		default:
			key = b(fmt.Sprintf("key-%d", i%6))
		}
		var value []byte
		switch {
		case i%5 == 2:
		case i%7 == 4:
			value = []byte{}
		default:
			value = b(strings.Repeat(fmt.Sprintf("%s value %d ", tag, i), 1+i%9))
		}
		out = append(out, rec{int32(i % 2), key, value})
	}
	return out
}

func (r *run) client(bootstrap string, opts ...kgo.Opt) (*kgo.Client, error) {
	all := []kgo.Opt{kgo.SeedBrokers(bootstrap), kgo.ClientID("px-go")}
	// PX_GO_LOG=debug (or info, warn): kgo's own log on stderr.
	levels := map[string]kgo.LogLevel{"debug": kgo.LogLevelDebug, "info": kgo.LogLevelInfo, "warn": kgo.LogLevelWarn}
	if level, ok := levels[os.Getenv("PX_GO_LOG")]; ok {
		all = append(all, kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, nil)))
	}
	return kgo.NewClient(append(all, opts...)...)
}

func (r *run) create(topic string, partitions int32, config map[string]*string) error {
	cl, err := r.client(r.proxy)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, config, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return failf("%s: create through the proxy: %v", topic, err)
	}
	return nil
}

func toRecord(topic string, x rec) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: x.partition, Key: x.key, Value: x.value}
}

// produce sends recs in order through the proxy with kgo's idempotent
// producer.
func (r *run) produce(topic string, codec kgo.CompressionCodec, recs []rec) error {
	cl, err := r.client(r.proxy,
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(20*time.Millisecond),
		kgo.RecordDeliveryTimeout(30*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var rs []*kgo.Record
	for _, x := range recs {
		rs = append(rs, toRecord(topic, x))
	}
	for i, res := range cl.ProduceSync(ctx, rs...) {
		if res.Err != nil {
			return failf("%s: record %d through the proxy: %v", topic, i, res.Err)
		}
	}
	return nil
}

func sortGot(out []got) {
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].partition != out[j].partition {
			return out[i].partition < out[j].partition
		}
		return out[i].offset < out[j].offset
	})
}

// readAssigned reads every record of the topic's partitions from the start
// to the high watermark (the markers kept, to see the end, and left out).
func (r *run) readAssigned(bootstrap, topic string, partitions int32, committed bool) ([]got, error) {
	level, name := kgo.ReadUncommitted(), "read_uncommitted"
	if committed {
		level, name = kgo.ReadCommitted(), "read_committed"
	}
	start := map[int32]kgo.Offset{}
	for p := int32(0); p < partitions; p++ {
		start[p] = kgo.NewOffset().AtStart()
	}
	cl, err := r.client(bootstrap,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(level),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, failf("%s: end offsets via %s: %v", topic, bootstrap, err)
	}
	pos := map[int32]int64{}
	var out []got
	for {
		done := true
		for p := int32(0); p < partitions; p++ {
			end, _ := ends.Lookup(topic, p)
			done = done && pos[p] >= end.Offset
		}
		if done {
			break
		}
		if ctx.Err() != nil {
			return nil, failf("%s: no end within %v via %s (%d records)", topic, wait, bootstrap, len(out))
		}
		poll, cancelPoll := context.WithTimeout(ctx, 500*time.Millisecond)
		fetches := cl.PollFetches(poll)
		cancelPoll()
		for _, e := range fetches.Errors() {
			if errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, context.Canceled) {
				continue
			}
			return nil, failf("%s: consume error via %s (%s): %v", topic, bootstrap, name, e.Err)
		}
		fetches.EachRecord(func(x *kgo.Record) {
			pos[x.Partition] = x.Offset + 1
			if !x.Attrs.IsControl() {
				out = append(out, got{x.Partition, x.Offset, x.Key, x.Value})
			}
		})
	}
	sortGot(out)
	return out, nil
}

// readGroup reads expected records through the proxy as the one member of
// a new group (the classic protocol, or KIP-848's), commits, and checks the
// group and its committed offsets through kadm.
func (r *run) readGroup(topic string, partitions int32, protocol string, expected int) ([]got, error) {
	group := topic + "-" + protocol
	opts := []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}
	if protocol == "consumer" {
		opts = append(opts, kgo.Balancers(kgo.RangeBalancer()), kgo.ServerSideBalancer())
	} else {
		opts = append(opts, kgo.SessionTimeout(15*time.Second), kgo.HeartbeatInterval(500*time.Millisecond))
	}
	cl, err := r.client(r.proxy, opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var out []got
	for len(out) < expected {
		if ctx.Err() != nil {
			return nil, failf("%s: group %s read %d of %d within %v", topic, protocol, len(out), expected, wait)
		}
		poll, cancelPoll := context.WithTimeout(ctx, 500*time.Millisecond)
		fetches := cl.PollFetches(poll)
		cancelPoll()
		for _, e := range fetches.Errors() {
			if errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, context.Canceled) {
				continue
			}
			return nil, failf("%s: group %s consume error through the proxy: %v", topic, protocol, e.Err)
		}
		fetches.EachRecord(func(x *kgo.Record) {
			out = append(out, got{x.Partition, x.Offset, x.Key, x.Value})
		})
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		return nil, failf("%s: group %s commit through the proxy: %v", topic, protocol, err)
	}
	want := map[int32]int64{}
	for p := int32(0); p < partitions; p++ {
		want[p] = 0
	}
	for _, g := range out {
		want[g.partition] = max(want[g.partition], g.offset+1)
	}
	adm := kadm.NewClient(cl)
	if protocol == "consumer" {
		d, err := adm.DescribeConsumerGroups(ctx, group)
		if err == nil {
			err = d.Error()
		}
		if err != nil || len(d[group].Members) != 1 {
			return nil, failf("%s: described through the proxy as a consumer group (KIP-848): %v, %d members", group, err, len(d[group].Members))
		}
	} else {
		d, err := adm.DescribeGroups(ctx, group)
		if err == nil {
			err = d.Error()
		}
		if err != nil || len(d[group].Members) != 1 || d[group].ProtocolType != "consumer" {
			return nil, failf("%s: described through the proxy as a classic group: %v, %d members", group, err, len(d[group].Members))
		}
	}
	offsets, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = offsets.Error()
	}
	if err != nil {
		return nil, failf("%s: committed offsets through the proxy: %v", group, err)
	}
	have := map[int32]int64{}
	offsets.Each(func(o kadm.OffsetResponse) { have[o.Partition] = o.At })
	if fmt.Sprint(have) != fmt.Sprint(want) {
		return nil, failf("%s: committed offsets %v through the proxy, %v read", group, have, want)
	}
	sortGot(out)
	return out, nil
}

// byPartition is sent in the order a reader of each partition sees it.
func byPartition(sent []rec, partitions int32) []rec {
	var out []rec
	for p := int32(0); p < partitions; p++ {
		for _, x := range sent {
			if x.partition == p {
				out = append(out, x)
			}
		}
	}
	return out
}

// same: the records read equal those sent, partition by partition, null and
// empty apart.
func same(what string, sent []rec, read []got) error {
	if len(sent) != len(read) {
		return failf("%s: %d records, %d sent", what, len(read), len(sent))
	}
	eq := func(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }
	for i, s := range sent {
		g := read[i]
		if s.partition != g.partition || !eq(s.key, g.key) || !eq(s.value, g.value) {
			return failf("%s: record %d is %d/%s=%s, sent %d/%s=%s", what, i,
				g.partition, show(g.key), show(g.value), s.partition, show(s.key), show(s.value))
		}
	}
	return nil
}

// sealed checks what the broker holds for sent: every value a ciphertext of
// the value keyset that decrypts (TopicAndKey) to what was sent, no
// plaintext in it; every key a ciphertext of the key keyset's primary, one
// wire form per key; every tombstone null. Messages name label.
func (r *run) sealed(topic, label string, sent []rec, direct []got) error {
	if len(sent) != len(direct) {
		return failf("%s: %d records on the broker, %d sent", label, len(direct), len(sent))
	}
	forms := map[string]string{}
	seen := map[string]bool{}
	for i, s := range sent {
		d := direct[i]
		where := fmt.Sprintf("%s-%d record %d", label, d.partition, i)
		if s.value == nil {
			if d.value != nil {
				return failf("%s: a tombstone reached the broker as a value", where)
			}
		} else {
			if d.value == nil {
				return failf("%s: a value reached the broker as a tombstone", where)
			}
			if len(d.value) != len(s.value)+33 || d.value[0] != 1 {
				return failf("%s: the value on the broker is not a ciphertext (%d bytes for %d)", where, len(d.value), len(s.value))
			}
			if len(s.value) >= 4 && bytes.Contains(d.value, s.value) {
				return failf("%s: the plaintext value is on the broker", where)
			}
			pt, err := decrypt(r.values, d.value, valueAd(topic, s.key))
			if err != nil {
				return failf("%s: the value does not decrypt: %v", where, err)
			}
			if !bytes.Equal(pt, s.value) {
				return failf("%s: the value decrypts to another value", where)
			}
		}
		if s.key == nil {
			if d.key != nil {
				return failf("%s: a null key became a key", where)
			}
			continue
		}
		if d.key == nil || len(d.key) != len(s.key)+21 || d.key[0] != 1 || keyID(d.key) != r.keys.primary {
			return failf("%s: the key on the broker is not a ciphertext of the key keyset", where)
		}
		if len(s.key) >= 4 && bytes.Contains(d.key, s.key) {
			return failf("%s: the plaintext key is on the broker", where)
		}
		if before, ok := forms[string(s.key)]; ok && before != string(d.key) {
			return failf("%s: a key has two forms on the broker", where)
		}
		if _, ok := forms[string(s.key)]; !ok {
			if seen[string(d.key)] {
				return failf("%s: two keys share a form on the broker", where)
			}
			seen[string(d.key)] = true
		}
		forms[string(s.key)] = string(d.key)
	}
	return nil
}

func (r *run) idempotent() error {
	topic := r.prefix + "idempotent"
	if err := r.create(topic, 2, nil); err != nil {
		return err
	}
	recs := records("idempotent", 40)
	if err := r.produce(topic, kgo.GzipCompression(), recs); err != nil {
		return err
	}
	sent := byPartition(recs, 2)
	direct, err := r.readAssigned(r.broker, topic, 2, false)
	if err != nil {
		return err
	}
	if err := r.sealed(topic, topic, sent, direct); err != nil {
		return err
	}
	through, err := r.readAssigned(r.proxy, topic, 2, true)
	if err != nil {
		return err
	}
	return same(topic+" read through the proxy", sent, through)
}

func (r *run) group(protocol string) error {
	topic := r.prefix + "idempotent"
	sent := byPartition(records("idempotent", 40), 2)
	read, err := r.readGroup(topic, 2, protocol, len(sent))
	if err != nil {
		return err
	}
	return same(fmt.Sprintf("%s read by a %s group through the proxy", topic, protocol), sent, read)
}

// transaction writes recs in one transaction through the proxy, committed
// or aborted.
func (r *run) transaction(cl *kgo.Client, topic string, recs []rec, commit bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	how := map[bool]string{true: "commit", false: "abort"}[commit]
	if err := cl.BeginTransaction(); err != nil {
		return failf("%s: begin a transaction through the proxy: %v", topic, err)
	}
	var rs []*kgo.Record
	for _, x := range recs {
		rs = append(rs, toRecord(topic, x))
	}
	for i, res := range cl.ProduceSync(ctx, rs...) {
		if res.Err != nil {
			return failf("%s: record %d in a transaction (%s) through the proxy: %v", topic, i, how, res.Err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		return failf("%s: end a transaction (%s) through the proxy: %v", topic, how, err)
	}
	return nil
}

func (r *run) transactional(topic string, codec kgo.CompressionCodec) (*kgo.Client, error) {
	return r.client(r.proxy,
		kgo.TransactionalID(topic+"-producer"),
		kgo.TransactionTimeout(30*time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(20*time.Millisecond))
}

func (r *run) transactions() error {
	topic := r.prefix + "transactions"
	if err := r.create(topic, 2, nil); err != nil {
		return err
	}
	all := records("transactions", 40)
	first, second := all[:20], all[20:]
	var aborted []rec
	for i := 0; i < 10; i++ {
		var value []byte
		switch i {
		case 4:
		case 7:
			value = []byte{}
		default:
			value = b(fmt.Sprintf("aborted value %d", i))
		}
		aborted = append(aborted, rec{int32(i % 2), b(fmt.Sprintf("key-%d", i%3)), value})
	}
	cl, err := r.transactional(topic, kgo.Lz4Compression())
	if err != nil {
		return err
	}
	defer cl.Close()
	for _, t := range []struct {
		recs   []rec
		commit bool
	}{{first, true}, {aborted, false}, {second, true}} {
		if err := r.transaction(cl, topic, t.recs, t.commit); err != nil {
			return err
		}
	}
	committed := append(append([]rec{}, first...), second...)
	everything := append(append(append([]rec{}, first...), aborted...), second...)
	for _, c := range []struct {
		bootstrap string
		committed bool
		want      []rec
	}{
		{r.proxy, true, committed},
		{r.proxy, false, everything},
		{r.broker, false, everything},
		{r.broker, true, committed},
	} {
		read, err := r.readAssigned(c.bootstrap, topic, 2, c.committed)
		if err != nil {
			return err
		}
		want := byPartition(c.want, 2)
		level := map[bool]string{true: "read_committed", false: "read_uncommitted"}[c.committed]
		if c.bootstrap == r.proxy {
			err = same(topic+" "+level+" through the proxy", want, read)
		} else {
			err = r.sealed(topic, topic+" "+level, want, read)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// versions: several versions of five keys, written in rounds.
var versionTable = [][]*string{
	{ptr("k0"), ptr("v0-a"), ptr("v0-b"), ptr("v0-c")},
	{ptr("k1"), ptr("v1-a"), nil},
	{ptr("k2"), ptr("v2-a"), ptr("")},
	{ptr("k3"), ptr("v3-a"), nil, ptr("v3-c")},
	{ptr("k4"), ptr(""), ptr("v4-b")},
}

func ptr(s string) *string { return &s }

func versions() []rec {
	var out []rec
	for round := 1; round <= 3; round++ {
		for _, v := range versionTable {
			if round < len(v) {
				var value []byte
				if v[round] != nil {
					value = []byte(*v[round])
				}
				out = append(out, rec{0, b(*v[0]), value})
			}
		}
	}
	return out
}

// lastOfEach returns each key's last record, in the order of those records.
func lastOfEach(recs []rec) []rec {
	var out []rec
	for i, x := range recs {
		last := true
		for _, y := range recs[i+1:] {
			last = last && !bytes.Equal(x.key, y.key)
		}
		if last {
			out = append(out, x)
		}
	}
	return out
}

func (r *run) compactionWrite() error {
	topic := r.prefix + "compaction"
	if err := r.create(topic, 1, map[string]*string{"cleanup.policy": ptr("compact")}); err != nil {
		return err
	}
	recs := versions()
	if err := r.produce(topic, kgo.SnappyCompression(), recs); err != nil {
		return err
	}
	direct, err := r.readAssigned(r.broker, topic, 1, false)
	if err != nil {
		return err
	}
	if err := r.sealed(topic, topic, recs, direct); err != nil {
		return err
	}
	through, err := r.readAssigned(r.proxy, topic, 1, true)
	if err != nil {
		return err
	}
	return same(topic+" read through the proxy", recs, through)
}

func (r *run) compactionRead() error {
	topic := r.prefix + "compaction"
	want := lastOfEach(versions())
	direct, err := r.readAssigned(r.broker, topic, 1, false)
	if err != nil {
		return err
	}
	if err := r.sealed(topic, topic+" (compacted)", want, direct); err != nil {
		return err
	}
	through, err := r.readAssigned(r.proxy, topic, 1, true)
	if err != nil {
		return err
	}
	return same(topic+" (compacted) read through the proxy", want, through)
}

func (r *run) rotationBefore() error {
	topic := r.prefix + "rotation"
	if err := r.create(topic, 1, map[string]*string{"cleanup.policy": ptr("compact")}); err != nil {
		return err
	}
	recs := []rec{{0, b("k1"), b("v1")}, {0, b("k2"), b("v2")}}
	if err := r.produce(topic, kgo.NoCompression(), recs); err != nil {
		return err
	}
	through, err := r.readAssigned(r.proxy, topic, 1, true)
	if err != nil {
		return err
	}
	return same(topic+" read through the proxy", recs, through)
}

// lastOf is the last record of key read through the proxy.
func lastOf(read []got, key string) *got {
	var last *got
	for i := range read {
		if bytes.Equal(read[i].key, b(key)) {
			last = &read[i]
		}
	}
	return last
}

// checkLive: on the broker, the newest record of every older key form is a
// tombstone and one form is live.
func (r *run) checkLive(topic string, direct []got, when string) error {
	newest := map[string]got{}
	for _, d := range direct {
		newest[string(d.key)] = d
	}
	older := r.keys.older()
	live := 0
	for _, d := range newest {
		if d.value == nil {
			continue
		}
		if older[keyID(d.key)] {
			return failf("%s: %s the older form of a key is still live on the broker (offset %d)", topic, when, d.offset)
		}
		live++
	}
	if live != 1 {
		return failf("%s: %s %d key forms are live on the broker, not 1 (k1's new one)", topic, when, live)
	}
	return nil
}

func (r *run) rotationAfter() error {
	topic := r.prefix + "rotation"
	older := r.keys.older()
	if len(older) == 0 {
		return failf("rotation-after needs a key keyset with two enabled keys")
	}
	cl, err := r.transactional(topic, kgo.NoCompression())
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := r.transaction(cl, topic, []rec{{0, b("k1"), b("v1-aborted")}, {0, b("k2"), nil}}, false); err != nil {
		return err
	}
	through, err := r.readAssigned(r.proxy, topic, 1, true)
	if err != nil {
		return err
	}
	for _, kv := range [][2]string{{"k1", "v1"}, {"k2", "v2"}} {
		last := lastOf(through, kv[0])
		if last == nil || !bytes.Equal(last.value, b(kv[1])) || last.value == nil {
			reads := "nothing"
			if last != nil {
				reads = show(last.value)
			}
			return failf("%s: after the aborted transaction %s reads %s, not %q: the abort deleted it", topic, kv[0], reads, kv[1])
		}
	}
	direct, err := r.readAssigned(r.broker, topic, 1, true)
	if err != nil {
		return err
	}
	for _, d := range direct {
		if d.value == nil {
			return failf("%s: after the aborted transaction a tombstone is committed on the broker at offset %d", topic, d.offset)
		}
	}
	// The aborted batch did carry the older forms' tombstones (the write
	// rule applied), and they were aborted with it.
	uncommitted, err := r.readAssigned(r.broker, topic, 1, false)
	if err != nil {
		return err
	}
	tombstoned := map[string]bool{}
	for _, d := range uncommitted {
		if d.value == nil && d.key != nil && older[keyID(d.key)] {
			tombstoned[string(d.key)] = true
		}
	}
	if len(tombstoned) != 2 {
		return failf("%s: the aborted transaction held %d tombstones of an older form, not 2: the write rule was not applied", topic, len(tombstoned))
	}
	if err := r.transaction(cl, topic, []rec{{0, b("k1"), b("v1-new")}, {0, b("k2"), nil}}, true); err != nil {
		return err
	}
	through, err = r.readAssigned(r.proxy, topic, 1, true)
	if err != nil {
		return err
	}
	k1, k2 := lastOf(through, "k1"), lastOf(through, "k2")
	if k1 == nil || !bytes.Equal(k1.value, b("v1-new")) || k2 == nil || k2.value != nil {
		return failf("%s: after the committed transaction k1 reads %v and k2 %v", topic, k1, k2)
	}
	// Read as written: the write rule's tombstones are the proxy's, on the
	// broker only, not a delete before each record.
	read := []string{}
	for _, g := range through {
		read = append(read, string(g.key)+"="+show(g.value))
	}
	written := []string{`k1="v1"`, `k2="v2"`, `k1="v1-new"`, `k2=null`}
	if fmt.Sprint(read) != fmt.Sprint(written) {
		return failf("%s: read through the proxy %v, not what was written %v", topic, read, written)
	}
	direct, err = r.readAssigned(r.broker, topic, 1, true)
	if err != nil {
		return err
	}
	return r.checkLive(topic, direct, "after the commit")
}

func (r *run) rotationCompacted() error {
	topic := r.prefix + "rotation"
	direct, err := r.readAssigned(r.broker, topic, 1, true)
	if err != nil {
		return err
	}
	forms := map[string]bool{}
	for _, d := range direct {
		forms[string(d.key)] = true
	}
	if len(forms) != len(direct) {
		return failf("%s: after compaction %d records for %d key forms on the broker", topic, len(direct), len(forms))
	}
	if err := r.checkLive(topic, direct, "after compaction"); err != nil {
		return err
	}
	through, err := r.readAssigned(r.proxy, topic, 1, true)
	if err != nil {
		return err
	}
	present := map[string]int{}
	for _, g := range through {
		if g.value != nil {
			present[string(g.key)]++
		}
	}
	k1 := lastOf(through, "k1")
	if len(present) != 1 || present["k1"] != 1 || k1 == nil || !bytes.Equal(k1.value, b("v1-new")) {
		return failf("%s: after compaction the present values read through the proxy are %v", topic, present)
	}
	return nil
}

// answersAPIVersionsV5 sends ApiVersions v5 (KIP-1242), the version kgo
// asks first, and reports whether addr answers it.
func answersAPIVersionsV5(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	// size 26 | api 18 | v5 | correlation 1 | client id "probe" | no header
	// tags | software name "x", version "1" | cluster id null | node id -1 |
	// no tags
	req := []byte("\x00\x00\x00\x1a\x00\x12\x00\x05\x00\x00\x00\x01\x00\x05probe\x00\x02x\x021\x00\xff\xff\xff\xff\x00")
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(req); err != nil {
		return false
	}
	head := make([]byte, 4)
	_, err = conn.Read(head)
	return err == nil
}

func main() {
	if len(os.Args) < 7 {
		fmt.Fprintln(os.Stderr, "usage: proxyclients PHASE PROXY BROKER PREFIX VALUE_KEYSET KEY_KEYSET [CASES]")
		os.Exit(2)
	}
	phase := os.Args[1]
	r := &run{proxy: os.Args[2], broker: os.Args[3], prefix: os.Args[4]}
	var err error
	if r.values, err = readKeyset(os.Args[5]); err != nil {
		fmt.Fprintf(os.Stderr, "FAILED: %v\n", err)
		os.Exit(1)
	}
	if r.keys, err = readKeyset(os.Args[6]); err != nil {
		fmt.Fprintf(os.Stderr, "FAILED: %v\n", err)
		os.Exit(1)
	}
	if !answersAPIVersionsV5(r.proxy) {
		// Said plainly, rather than as a client that retries until its
		// deadline.
		fmt.Fprintln(os.Stderr, "FAILED: the proxy does not answer ApiVersions v5 (KIP-1242), which kgo sends first on every connection: each closes at its first request")
		os.Exit(1)
	}
	cases := []string{phase}
	if phase == "clients" {
		cases = []string{"idempotent", "classic", "consumer", "transactions"}
		if len(os.Args) > 7 {
			cases = strings.Split(os.Args[7], ",")
		}
	}
	var done []string
	for _, name := range cases {
		switch name {
		case "idempotent":
			err = r.idempotent()
		case "classic", "consumer":
			err = r.group(name)
		case "transactions":
			err = r.transactions()
		case "compaction-write":
			err = r.compactionWrite()
		case "compaction-read":
			err = r.compactionRead()
		case "rotation-before":
			err = r.rotationBefore()
		case "rotation-after":
			err = r.rotationAfter()
		case "rotation-compacted":
			err = r.rotationCompacted()
		default:
			err = failf("unknown case %s", name)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAILED: %v\n", err)
			os.Exit(1)
		}
		fmt.Printf("go: %s: ok\n", name)
		done = append(done, fmt.Sprintf("%q", name))
	}
	fmt.Printf("{\"ok\": true, \"client\": \"franz-go\", \"cases\": [%s]}\n", strings.Join(done, ", "))
}
