package clients;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;

/**
 * Apache Kafka's Java client (kafka-clients) through the tombstone-crypt
 * proxy, checked beside it with the JDK's AES-GCM ({@link Tink}).
 *
 * <pre>
 * ProxyClients PHASE PROXY BROKER PREFIX VALUE_KEYSET KEY_KEYSET [CASES]
 * </pre>
 *
 * Phases (each topic is PREFIX + a name):
 * <ul>
 *   <li>{@code clients} runs CASES (comma-separated, default all):
 *       {@code idempotent} (an idempotent producer, gzip, writes keyed and
 *       unkeyed records, an empty key, tombstones and empty values to the two
 *       partitions of {@code idempotent}; beside the proxy every value is a
 *       ciphertext that decrypts to what was sent, every key a ciphertext of
 *       the key keyset, every tombstone null, every empty value a 33-byte
 *       ciphertext), {@code classic} and {@code consumer} (a consumer group
 *       through the proxy with {@code group.protocol=classic}, and with
 *       {@code consumer}, KIP-848: reads exactly what was sent, commits, and
 *       the group's type and committed offsets read back through the proxy's
 *       Admin), {@code transactions} (a transactional producer, lz4: a
 *       committed transaction with offsets sent to it, an aborted one, a
 *       committed one; through the proxy {@code read_committed} reads the
 *       committed records only, {@code read_uncommitted} all three as written,
 *       decrypted; beside it all are sealed).</li>
 *   <li>{@code compaction-write}, then the test compacts, then
 *       {@code compaction-read}: several versions of five keys on a compacted
 *       topic, a tombstone and an empty value last of two of them; once
 *       compacted, one record per key through the proxy (its last: the
 *       tombstone null, the empty value empty) and one per key beside it.</li>
 *   <li>{@code rotation-before} (one key in KEY_KEYSET) writes k1 and k2;
 *       {@code rotation-after} (KEY_KEYSET rotated: two enabled keys) writes a
 *       new k1 and deletes k2 in a transaction that aborts (both still read as
 *       before under {@code read_committed}, nothing deleted on the broker,
 *       though the aborted batch held the older forms' tombstones), then in
 *       one that commits (k1 has its new value, k2 is deleted, no older form
 *       is left live on the broker); the test compacts, then
 *       {@code rotation-compacted}: one record per key form on the broker,
 *       one live, and through the proxy k1 has one value and k2 none.</li>
 * </ul>
 * Prints one line per case and {"ok": true, ...} last; exits 1 with
 * "FAILED: " and the first difference on stderr.
 */
public final class ProxyClients {
  static final class Failed extends Exception {
    private static final long serialVersionUID = 1L;

    Failed(String message) {
      super(message);
    }
  }

  /** A record as sent. */
  record Rec(int partition, byte[] key, byte[] value) {}

  /** A record as read. */
  record Got(int partition, long offset, byte[] key, byte[] value) {}

  static final Duration WAIT = Duration.ofSeconds(60);

  final String proxy;
  final String broker;
  final String prefix;
  final Tink.Keyset values;
  final Tink.Keyset keys;

  ProxyClients(String proxy, String broker, String prefix, Tink.Keyset values, Tink.Keyset keys) {
    this.proxy = proxy;
    this.broker = broker;
    this.prefix = prefix;
    this.values = values;
    this.keys = keys;
  }

  static byte[] b(String s) {
    return s == null ? null : s.getBytes(StandardCharsets.UTF_8);
  }

  static String show(byte[] v) {
    if (v == null) return "null";
    String s = new String(v, StandardCharsets.UTF_8);
    return "\"" + (s.length() > 24 ? s.substring(0, 24) + "..." : s) + "\"";
  }

  /** Keyed and unkeyed records, an empty key, tombstones, empty values. */
  static List<Rec> records(String tag, int n) {
    List<Rec> out = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      byte[] key = i % 4 == 3 ? null : i % 11 == 5 ? new byte[0] : b("key-" + (i % 6));
      byte[] value;
      if (i % 5 == 2) value = null;
      else if (i % 7 == 4) value = new byte[0];
      else value = b((tag + " value " + i + " ").repeat(1 + i % 9));
      out.add(new Rec(i % 2, key, value));
    }
    return out;
  }

  Properties common(String bootstrap) {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("client.id", "px-java");
    return p;
  }

  Properties producerProps(String compression) {
    Properties p = common(proxy);
    p.put("key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
    p.put("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
    p.put("acks", "all");
    p.put("enable.idempotence", "true");
    p.put("compression.type", compression);
    p.put("linger.ms", "20");
    p.put("delivery.timeout.ms", "30000");
    p.put("request.timeout.ms", "10000");
    p.put("max.block.ms", "30000");
    return p;
  }

  Properties consumerProps(String bootstrap, String isolation) {
    Properties p = common(bootstrap);
    p.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
    p.put("value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
    p.put("auto.offset.reset", "earliest");
    p.put("enable.auto.commit", "false");
    p.put("isolation.level", isolation);
    p.put("fetch.max.wait.ms", "100");
    return p;
  }

  Admin admin() {
    return Admin.create(common(proxy));
  }

  void create(String topic, int partitions, Map<String, String> config) throws Failed {
    try (Admin a = admin()) {
      a.createTopics(List.of(new NewTopic(topic, partitions, (short) 1).configs(config)))
          .all()
          .get();
    } catch (Exception e) {
      throw new Failed(topic + ": create through the proxy: " + e);
    }
  }

  /** Sends `recs` with an idempotent producer, in order; each delivery's offset. */
  List<Long> produce(String topic, String compression, List<Rec> recs) throws Failed {
    List<Long> offsets = new ArrayList<>();
    try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(producerProps(compression))) {
      List<Future<RecordMetadata>> sent = new ArrayList<>();
      for (Rec r : recs) sent.add(p.send(new ProducerRecord<>(topic, r.partition, r.key, r.value)));
      p.flush();
      for (int i = 0; i < sent.size(); i++) {
        try {
          offsets.add(sent.get(i).get().offset());
        } catch (ExecutionException e) {
          throw new Failed(topic + ": record " + i + " through the proxy: " + e.getCause());
        }
      }
    } catch (InterruptedException | RuntimeException e) {
      throw new Failed(topic + ": produce through the proxy: " + e);
    }
    return offsets;
  }

  /** Every record of the topic's partitions, from the start to the end `isolation` sees. */
  List<Got> readAssigned(String bootstrap, String topic, int partitions, String isolation)
      throws Failed {
    List<Got> out = new ArrayList<>();
    List<TopicPartition> tps = new ArrayList<>();
    for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(consumerProps(bootstrap, isolation))) {
      c.assign(tps);
      c.seekToBeginning(tps);
      Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
      long deadline = System.nanoTime() + WAIT.toNanos();
      while (true) {
        boolean done = true;
        for (TopicPartition tp : tps) done &= c.position(tp) >= end.get(tp);
        if (done) break;
        if (System.nanoTime() > deadline) {
          throw new Failed(topic + ": no end within " + WAIT + " via " + bootstrap + " (" + out.size() + " records)");
        }
        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
          out.add(new Got(r.partition(), r.offset(), r.key(), r.value()));
        }
      }
    } catch (RuntimeException e) {
      throw new Failed(topic + ": consume error via " + bootstrap + " (" + isolation + "): " + e);
    }
    out.sort((x, y) -> x.partition != y.partition ? Integer.compare(x.partition, y.partition) : Long.compare(x.offset, y.offset));
    return out;
  }

  /**
   * Reads `expected` records through the proxy as the one member of a new
   * group of `protocol`, commits, and checks the group's type and its
   * committed offsets through the proxy's Admin.
   */
  List<Got> readGroup(String topic, int partitions, String protocol, int expected) throws Failed {
    String group = topic + "-" + protocol;
    Properties props = consumerProps(proxy, "read_committed");
    props.put("group.id", group);
    props.put("group.protocol", protocol);
    if (protocol.equals("classic")) {
      props.put("session.timeout.ms", "15000");
      props.put("heartbeat.interval.ms", "500");
    }
    List<Got> out = new ArrayList<>();
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props); Admin a = admin()) {
      c.subscribe(List.of(topic));
      long deadline = System.nanoTime() + WAIT.toNanos();
      while (out.size() < expected) {
        if (System.nanoTime() > deadline) {
          throw new Failed(topic + ": group " + protocol + " read " + out.size() + " of " + expected + " within " + WAIT);
        }
        for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
          out.add(new Got(r.partition(), r.offset(), r.key(), r.value()));
        }
      }
      c.commitSync(Duration.ofSeconds(30));
      Map<Integer, Long> want = new HashMap<>();
      for (int p = 0; p < partitions; p++) want.put(p, 0L);
      for (Got g : out) want.merge(g.partition, g.offset + 1, Math::max);
      ConsumerGroupDescription d =
          a.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
      GroupType type = protocol.equals("classic") ? GroupType.CLASSIC : GroupType.CONSUMER;
      if (d.type() != type || d.members().size() != 1) {
        throw new Failed(group + ": described through the proxy as " + d.type() + " with " + d.members().size() + " members, not " + type + " with 1");
      }
      Map<TopicPartition, OffsetAndMetadata> committed =
          a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
      Map<Integer, Long> got = new HashMap<>();
      for (var e : committed.entrySet()) got.put(e.getKey().partition(), e.getValue().offset());
      if (!got.equals(want)) {
        throw new Failed(group + ": committed offsets " + got + " through the proxy, " + want + " read");
      }
    } catch (InterruptedException | ExecutionException | RuntimeException e) {
      throw new Failed(topic + ": group " + protocol + " through the proxy: " + e);
    }
    out.sort((x, y) -> x.partition != y.partition ? Integer.compare(x.partition, y.partition) : Long.compare(x.offset, y.offset));
    return out;
  }

  /** `sent` in the order a reader of each partition sees it. */
  static List<Rec> byPartition(List<Rec> sent, int partitions) {
    List<Rec> out = new ArrayList<>();
    for (int p = 0; p < partitions; p++) {
      for (Rec r : sent) if (r.partition == p) out.add(r);
    }
    return out;
  }

  /** The records read equal those sent, partition by partition, null and empty apart. */
  static void same(String what, List<Rec> sent, List<Got> got) throws Failed {
    if (sent.size() != got.size()) {
      throw new Failed(what + ": " + got.size() + " records, " + sent.size() + " sent");
    }
    for (int i = 0; i < sent.size(); i++) {
      Rec s = sent.get(i);
      Got g = got.get(i);
      if (s.partition != g.partition || !Arrays.equals(s.key, g.key) || !Arrays.equals(s.value, g.value)) {
        throw new Failed(what + ": record " + i + " is " + g.partition + "/" + show(g.key) + "=" + show(g.value)
            + ", sent " + s.partition + "/" + show(s.key) + "=" + show(s.value));
      }
    }
  }

  static boolean contains(byte[] hay, byte[] needle) {
    outer:
    for (int i = 0; i + needle.length <= hay.length; i++) {
      for (int j = 0; j < needle.length; j++) if (hay[i + j] != needle[j]) continue outer;
      return true;
    }
    return false;
  }

  /**
   * What the broker holds for `sent`: every value a ciphertext of the value
   * keyset that decrypts (TopicAndKey) to what was sent, no plaintext in it;
   * every key a ciphertext of the key keyset's primary, one wire form per
   * key; every tombstone null.
   */
  void sealed(String topic, List<Rec> sent, List<Got> direct) throws Failed {
    sealed(topic, topic, sent, direct);
  }

  /** {@link #sealed(String, List, List)}, its messages naming `label`. */
  void sealed(String topic, String label, List<Rec> sent, List<Got> direct) throws Failed {
    if (sent.size() != direct.size()) {
      throw new Failed(label + ": " + direct.size() + " records on the broker, " + sent.size() + " sent");
    }
    Map<String, String> forms = new HashMap<>();
    for (int i = 0; i < sent.size(); i++) {
      Rec s = sent.get(i);
      Got d = direct.get(i);
      String where = label + "-" + d.partition + " record " + i;
      if (s.value == null) {
        if (d.value != null) throw new Failed(where + ": a tombstone reached the broker as a value");
      } else {
        if (d.value == null) throw new Failed(where + ": a value reached the broker as a tombstone");
        if (d.value.length != s.value.length + 33 || d.value[0] != 1) {
          throw new Failed(where + ": the value on the broker is not a ciphertext (" + d.value.length + " bytes for " + s.value.length + ")");
        }
        if (s.value.length >= 4 && contains(d.value, s.value)) {
          throw new Failed(where + ": the plaintext value is on the broker");
        }
        byte[] pt;
        try {
          pt = Tink.decrypt(values, d.value, Tink.valueAd(topic, s.key));
        } catch (Exception e) {
          throw new Failed(where + ": the value does not decrypt: " + e);
        }
        if (!Arrays.equals(pt, s.value)) throw new Failed(where + ": the value decrypts to another value");
      }
      if (s.key == null) {
        if (d.key != null) throw new Failed(where + ": a null key became a key");
      } else {
        if (d.key == null || d.key.length != s.key.length + 21 || d.key[0] != 1 || Tink.keyId(d.key) != keys.primary) {
          throw new Failed(where + ": the key on the broker is not a ciphertext of the key keyset");
        }
        if (s.key.length >= 4 && contains(d.key, s.key)) {
          throw new Failed(where + ": the plaintext key is on the broker");
        }
        String plain = Arrays.toString(s.key);
        String wire = Arrays.toString(d.key);
        String before = forms.putIfAbsent(plain, wire);
        if (before != null && !before.equals(wire)) throw new Failed(where + ": a key has two forms on the broker");
      }
    }
    if (new HashSet<>(forms.values()).size() != forms.size()) {
      throw new Failed(label + ": two keys share a form on the broker");
    }
  }

  void idempotent() throws Failed {
    String topic = prefix + "idempotent";
    create(topic, 2, Map.of());
    List<Rec> recs = records("idempotent", 40);
    produce(topic, "gzip", recs);
    List<Rec> sent = byPartition(recs, 2);
    sealed(topic, sent, readAssigned(broker, topic, 2, "read_uncommitted"));
    same(topic + " read through the proxy", sent, readAssigned(proxy, topic, 2, "read_committed"));
  }

  void group(String protocol) throws Failed {
    String topic = prefix + "idempotent";
    List<Rec> sent = byPartition(records("idempotent", 40), 2);
    same(topic + " read by a " + protocol + " group through the proxy", sent, readGroup(topic, 2, protocol, sent.size()));
  }

  void transactions() throws Failed {
    String topic = prefix + "transactions";
    create(topic, 2, Map.of());
    List<Rec> all = records("transactions", 40);
    List<Rec> first = all.subList(0, 20);
    List<Rec> second = all.subList(20, 40);
    List<Rec> aborted = new ArrayList<>();
    for (int i = 0; i < 10; i++) {
      byte[] value = i == 4 ? null : i == 7 ? new byte[0] : b("aborted value " + i);
      aborted.add(new Rec(i % 2, b("key-" + (i % 3)), value));
    }
    String group = topic + "-txn-group";
    Properties props = producerProps("lz4");
    props.put("transactional.id", topic + "-producer");
    props.put("transaction.timeout.ms", "30000");
    // A member of a consumer group (KIP-848) whose offsets go into the
    // first transaction (TxnOffsetCommit with its member id and epoch).
    Properties member = consumerProps(proxy, "read_committed");
    member.put("group.id", group);
    member.put("group.protocol", "consumer");
    try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props);
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(member)) {
      c.subscribe(List.of(topic));
      long deadline = System.nanoTime() + WAIT.toNanos();
      while (c.assignment().size() < 2) {
        if (System.nanoTime() > deadline) throw new Failed(group + ": no assignment through the proxy within " + WAIT);
        c.poll(Duration.ofMillis(200));
      }
      p.initTransactions();
      p.beginTransaction();
      for (Rec r : first) p.send(new ProducerRecord<>(topic, r.partition, r.key, r.value));
      p.sendOffsetsToTransaction(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(7)), c.groupMetadata());
      p.commitTransaction();
      p.beginTransaction();
      for (Rec r : aborted) p.send(new ProducerRecord<>(topic, r.partition, r.key, r.value));
      p.flush();
      p.abortTransaction();
      p.beginTransaction();
      for (Rec r : second) p.send(new ProducerRecord<>(topic, r.partition, r.key, r.value));
      p.commitTransaction();
    } catch (RuntimeException e) {
      throw new Failed(topic + ": a transactional producer through the proxy: " + e);
    }
    List<Rec> committed = new ArrayList<>(first);
    committed.addAll(second);
    List<Rec> everything = new ArrayList<>(first);
    everything.addAll(aborted);
    everything.addAll(second);
    same(topic + " read_committed through the proxy", byPartition(committed, 2), readAssigned(proxy, topic, 2, "read_committed"));
    same(topic + " read_uncommitted through the proxy", byPartition(everything, 2), readAssigned(proxy, topic, 2, "read_uncommitted"));
    sealed(topic, byPartition(everything, 2), readAssigned(broker, topic, 2, "read_uncommitted"));
    sealed(topic, byPartition(committed, 2), readAssigned(broker, topic, 2, "read_committed"));
    try (Admin a = admin()) {
      Map<TopicPartition, OffsetAndMetadata> offsets =
          a.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
      OffsetAndMetadata o = offsets.get(new TopicPartition(topic, 0));
      if (offsets.size() != 1 || o == null || o.offset() != 7) {
        throw new Failed(group + ": the offsets sent in the transaction read back as " + offsets);
      }
    } catch (InterruptedException | ExecutionException e) {
      throw new Failed(group + ": offsets through the proxy: " + e);
    }
  }

  // Compaction: versions of five keys, written in rounds.
  static final String[][] VERSIONS = {
    {"k0", "v0-a", "v0-b", "v0-c"},
    {"k1", "v1-a", null},
    {"k2", "v2-a", ""},
    {"k3", "v3-a", null, "v3-c"},
    {"k4", "", "v4-b"},
  };

  static List<Rec> versions() {
    List<Rec> out = new ArrayList<>();
    for (int round = 1; round <= 3; round++) {
      for (String[] v : VERSIONS) if (round < v.length) out.add(new Rec(0, b(v[0]), b(v[round])));
    }
    return out;
  }

  /** Each key's last record, in the order of those records. */
  static List<Rec> lastOfEach(List<Rec> recs) {
    List<Rec> out = new ArrayList<>();
    for (int i = 0; i < recs.size(); i++) {
      boolean last = true;
      for (int j = i + 1; j < recs.size(); j++) last &= !Arrays.equals(recs.get(j).key, recs.get(i).key);
      if (last) out.add(recs.get(i));
    }
    return out;
  }

  void compactionWrite() throws Failed {
    String topic = prefix + "compaction";
    create(topic, 1, Map.of("cleanup.policy", "compact"));
    List<Rec> recs = versions();
    produce(topic, "snappy", recs);
    sealed(topic, recs, readAssigned(broker, topic, 1, "read_uncommitted"));
    same(topic + " read through the proxy", recs, readAssigned(proxy, topic, 1, "read_committed"));
  }

  void compactionRead() throws Failed {
    String topic = prefix + "compaction";
    List<Rec> want = lastOfEach(versions());
    sealed(topic, topic + " (compacted)", want, readAssigned(broker, topic, 1, "read_uncommitted"));
    same(topic + " (compacted) read through the proxy", want, readAssigned(proxy, topic, 1, "read_committed"));
  }

  void rotationBefore() throws Failed {
    String topic = prefix + "rotation";
    create(topic, 1, Map.of("cleanup.policy", "compact"));
    List<Rec> recs = List.of(new Rec(0, b("k1"), b("v1")), new Rec(0, b("k2"), b("v2")));
    produce(topic, "none", recs);
    same(topic + " read through the proxy", recs, readAssigned(proxy, topic, 1, "read_committed"));
  }

  /** The last record of `key` read through the proxy. */
  static Got lastOf(List<Got> read, String key) {
    Got last = null;
    for (Got g : read) if (Arrays.equals(g.key, b(key))) last = g;
    return last;
  }

  /** The newest record of each key form on the broker, by form. */
  static Map<String, Got> newestByForm(List<Got> direct) {
    Map<String, Got> out = new HashMap<>();
    for (Got d : direct) out.put(Arrays.toString(d.key), d);
    return out;
  }

  /** Writes `recs` in one transaction through the proxy, committed or aborted. */
  void transaction(String topic, String id, List<Rec> recs, boolean commit) throws Failed {
    Properties props = producerProps("none");
    props.put("transactional.id", id);
    props.put("transaction.timeout.ms", "30000");
    try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props)) {
      p.initTransactions();
      p.beginTransaction();
      for (Rec r : recs) p.send(new ProducerRecord<>(topic, r.partition, r.key, r.value));
      p.flush();
      if (commit) p.commitTransaction();
      else p.abortTransaction();
    } catch (RuntimeException e) {
      throw new Failed(topic + ": a transaction through the proxy (" + (commit ? "commit" : "abort") + "): " + e);
    }
  }

  void rotationAfter() throws Failed {
    String topic = prefix + "rotation";
    if (keys.older().isEmpty()) throw new Failed("rotation-after needs a key keyset with two enabled keys");
    Set<Integer> older = new HashSet<>(keys.older());
    String id = topic + "-producer";
    transaction(topic, id, List.of(new Rec(0, b("k1"), b("v1-aborted")), new Rec(0, b("k2"), null)), false);
    List<Got> through = readAssigned(proxy, topic, 1, "read_committed");
    for (String[] kv : new String[][] {{"k1", "v1"}, {"k2", "v2"}}) {
      Got last = lastOf(through, kv[0]);
      if (last == null || !Arrays.equals(last.value, b(kv[1]))) {
        throw new Failed(topic + ": after the aborted transaction " + kv[0] + " reads " + (last == null ? "nothing" : show(last.value)) + ", not " + show(b(kv[1])) + ": the abort deleted it");
      }
    }
    for (Got d : readAssigned(broker, topic, 1, "read_committed")) {
      if (d.value == null) throw new Failed(topic + ": after the aborted transaction a tombstone is committed on the broker at offset " + d.offset);
    }
    // The aborted batch did carry the older forms' tombstones (the write
    // rule applied), and they were aborted with it.
    Set<String> tombstoned = new HashSet<>();
    for (Got d : readAssigned(broker, topic, 1, "read_uncommitted")) {
      if (d.value == null && d.key != null && older.contains(Tink.keyId(d.key))) tombstoned.add(Arrays.toString(d.key));
    }
    if (tombstoned.size() != 2) {
      throw new Failed(topic + ": the aborted transaction held " + tombstoned.size() + " tombstones of an older form, not 2: the write rule was not applied");
    }
    transaction(topic, id, List.of(new Rec(0, b("k1"), b("v1-new")), new Rec(0, b("k2"), null)), true);
    through = readAssigned(proxy, topic, 1, "read_committed");
    Got k1 = lastOf(through, "k1");
    Got k2 = lastOf(through, "k2");
    if (k1 == null || !Arrays.equals(k1.value, b("v1-new")) || k2 == null || k2.value != null) {
      throw new Failed(topic + ": after the committed transaction k1 reads " + (k1 == null ? "nothing" : show(k1.value)) + " and k2 " + (k2 == null ? "nothing" : show(k2.value)));
    }
    // Read as written: the write rule's tombstones are the proxy's, on the
    // broker only, not a delete before each record.
    List<String> read = new ArrayList<>();
    for (Got g : through) read.add(new String(g.key, StandardCharsets.UTF_8) + "=" + (g.value == null ? "null" : new String(g.value, StandardCharsets.UTF_8)));
    List<String> written = List.of("k1=v1", "k2=v2", "k1=v1-new", "k2=null");
    if (!read.equals(written)) {
      throw new Failed(topic + ": read through the proxy " + read + ", not what was written " + written);
    }
    checkLive(topic, readAssigned(broker, topic, 1, "read_committed"), older, "after the commit");
  }

  /** On the broker, the newest record of every older form is a tombstone and one form is live. */
  void checkLive(String topic, List<Got> direct, Set<Integer> older, String when) throws Failed {
    int live = 0;
    for (Got d : newestByForm(direct).values()) {
      if (d.value == null) continue;
      if (older.contains(Tink.keyId(d.key))) {
        throw new Failed(topic + ": " + when + " the older form of a key is still live on the broker (offset " + d.offset + ")");
      }
      live++;
    }
    if (live != 1) throw new Failed(topic + ": " + when + " " + live + " key forms are live on the broker, not 1 (k1's new one)");
  }

  void rotationCompacted() throws Failed {
    String topic = prefix + "rotation";
    Set<Integer> older = new HashSet<>(keys.older());
    List<Got> direct = readAssigned(broker, topic, 1, "read_committed");
    if (newestByForm(direct).size() != direct.size()) {
      throw new Failed(topic + ": after compaction " + direct.size() + " records for " + newestByForm(direct).size() + " key forms on the broker");
    }
    checkLive(topic, direct, older, "after compaction");
    List<Got> through = readAssigned(proxy, topic, 1, "read_committed");
    Map<String, Integer> present = new HashMap<>();
    for (Got g : through) if (g.value != null) present.merge(new String(g.key, StandardCharsets.UTF_8), 1, Integer::sum);
    if (!present.equals(Map.of("k1", 1)) || !Arrays.equals(lastOf(through, "k1").value, b("v1-new"))) {
      throw new Failed(topic + ": after compaction the present values read through the proxy are " + present + " (k1 last " + show(lastOf(through, "k1").value) + ")");
    }
  }

  /**
   * Whether `addr` answers ApiVersions v5 (KIP-1242), the version this
   * client sends first on every connection (it has no setting to ask less).
   */
  static boolean answersApiVersionsV5(String addr) {
    int colon = addr.lastIndexOf(':');
    // size 26 | api 18 | v5 | correlation 1 | client id "probe" | no header
    // tags | software name "x", version "1" | cluster id null | node id -1 |
    // no tags
    byte[] req = {
      0, 0, 0, 26, 0, 18, 0, 5, 0, 0, 0, 1, 0, 5, 'p', 'r', 'o', 'b', 'e', 0,
      2, 'x', 2, '1', 0, -1, -1, -1, -1, 0
    };
    try (java.net.Socket s = new java.net.Socket()) {
      s.connect(new java.net.InetSocketAddress(addr.substring(0, colon), Integer.parseInt(addr.substring(colon + 1))), 5000);
      s.setSoTimeout(5000);
      s.getOutputStream().write(req);
      return s.getInputStream().readNBytes(4).length == 4;
    } catch (java.io.IOException e) {
      return false;
    }
  }

  public static void main(String[] args) {
    if (args.length < 6) {
      System.err.println("usage: ProxyClients PHASE PROXY BROKER PREFIX VALUE_KEYSET KEY_KEYSET [CASES]");
      System.exit(2);
    }
    String phase = args[0];
    List<String> done = new ArrayList<>();
    try {
      ProxyClients c = new ProxyClients(args[1], args[2], args[3], Tink.read(Path.of(args[4])), Tink.read(Path.of(args[5])));
      if (!answersApiVersionsV5(c.proxy)) {
        // Said plainly, rather than as a client that times out.
        throw new Failed("the proxy does not answer ApiVersions v5 (KIP-1242), which kafka-clients 4.4.0 sends first on every connection: each closes at its first request");
      }
      List<String> cases = switch (phase) {
        case "clients" -> Arrays.asList((args.length > 6 ? args[6] : "idempotent,classic,consumer,transactions").split(","));
        default -> List.of(phase);
      };
      for (String name : cases) {
        switch (name) {
          case "idempotent" -> c.idempotent();
          case "classic" -> c.group("classic");
          case "consumer" -> c.group("consumer");
          case "transactions" -> c.transactions();
          case "compaction-write" -> c.compactionWrite();
          case "compaction-read" -> c.compactionRead();
          case "rotation-before" -> c.rotationBefore();
          case "rotation-after" -> c.rotationAfter();
          case "rotation-compacted" -> c.rotationCompacted();
          default -> throw new Failed("unknown case " + name);
        }
        System.out.println("java: " + name + ": ok");
        done.add("\"" + name + "\"");
      }
    } catch (Failed e) {
      System.err.println("FAILED: " + e.getMessage());
      System.exit(1);
    } catch (Exception e) {
      System.err.println("FAILED: " + e);
      e.printStackTrace();
      System.exit(1);
    }
    System.out.println("{\"ok\": true, \"client\": \"kafka-clients\", \"cases\": [" + String.join(", ", done) + "]}");
    System.exit(0);
  }
}
