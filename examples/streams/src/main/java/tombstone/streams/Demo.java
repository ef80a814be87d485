package tombstone.streams;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.state.Stores;

/**
 * The report's scenario in Kafka Streams, and the tools of
 * scripts/streams-demo.sh around it. Each command prints what it found on
 * stdout, one {@code name=value} summary line last.
 *
 * <pre>
 * app BOOTSTRAP MODE APP_ID STATE_DIR [--exit-when-deleted FROM-TO] [--linger N]
 *     [--exit-after-first-punctuation] [--stop-file F] [--fail-after KEY]
 *     [--pause-after KEY --pause-file F]
 * produce BOOTSTRAP APP_ID FROM-TO [--live N] [--await]
 * await BOOTSTRAP APP_ID FROM-TO
 * tombstones BOOTSTRAP TOPIC
 * sink BOOTSTRAP TOPIC [--since FILE] [--save FILE]
 * compact BOOTSTRAP CHANGELOG TIMEOUT_S
 * plaintext BOOTSTRAP TOPIC...
 * </pre>
 *
 * MODE: {@code plain} and {@code proxy} use String serdes (the proxy mode's
 * BOOTSTRAP is a tombstone-crypt proxy); {@code naive} puts the store's and
 * the sink's values through {@link NaiveSerde}. Topics: APP_ID-source,
 * APP_ID-sink, and Streams' own APP_ID-events-changelog and
 * APP_ID-by-id-repartition. Events to send and delete are keyed key-00,
 * key-01, ...; events the application keeps, live-0, live-1, ...
 */
public final class Demo {
    private Demo() {}

    static String key(int i) {
        return String.format("key-%02d", i);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            usage();
        }
        List<String> rest = List.of(args).subList(1, args.length);
        int rc = switch (args[0]) {
            case "app" -> app(rest);
            case "produce" -> produce(rest);
            case "await" -> await(rest);
            case "sink" -> sink(rest);
            case "compact" -> compact(rest);
            case "plaintext" -> plaintext(rest);
            case "tombstones" -> tombstones(rest);
            default -> usage();
        };
        System.out.flush();
        System.exit(rc);
    }

    private static int usage() {
        System.err.println("usage: Demo app|produce|await|sink|compact|plaintext|tombstones ... (see the class docs)");
        System.exit(2);
        return 2;
    }

    private static String option(List<String> args, String name) {
        int i = args.indexOf(name);
        return i >= 0 && i + 1 < args.size() ? args.get(i + 1) : null;
    }

    private static int[] range(String fromTo) {
        String[] p = fromTo.split("-");
        return new int[] {Integer.parseInt(p[0]), Integer.parseInt(p[1])};
    }

    // ---------------------------------------------------------------- app

    private static int app(List<String> args) throws Exception {
        String bootstrap = args.get(0);
        String mode = args.get(1);
        String appId = args.get(2);
        String stateDir = args.get(3);
        String exitWhen = option(args, "--exit-when-deleted");
        int linger = Integer.parseInt(java.util.Objects.requireNonNullElse(option(args, "--linger"), "0"));
        boolean exitAfterFirst = args.contains("--exit-after-first-punctuation");
        String failAfter = option(args, "--fail-after");
        String pauseAfter = option(args, "--pause-after");
        String pauseFile = option(args, "--pause-file");
        String stopFile = option(args, "--stop-file");

        Serde<String> values = switch (mode) {
            case "plain", "proxy" -> Serdes.String();
            case "naive" -> new NaiveSerde();
            default -> throw new IllegalArgumentException("mode: plain, naive or proxy");
        };

        // The changelog is compacted, and its cleaner removes tombstones
        // within seconds (scripts/kafka.sh's cleaner looks every 200 ms).
        Map<String, String> changelog = new HashMap<>();
        changelog.put("cleanup.policy", "compact");
        changelog.put("segment.ms", "100");
        changelog.put("min.cleanable.dirty.ratio", "0.01");
        changelog.put("delete.retention.ms", "1000");
        changelog.put("min.compaction.lag.ms", "0");

        Stats stats = new Stats();
        StreamsBuilder builder = new StreamsBuilder();
        builder.addStateStore(Stores.keyValueStoreBuilder(
                Stores.persistentKeyValueStore(EventProcessor.STORE), Serdes.String(), Serdes.ByteArray())
            .withLoggingEnabled(changelog)
            .withCachingDisabled());
        builder.stream(appId + "-source", Consumed.with(Serdes.String(), Serdes.String()))
            // A source record without a value is no event.
            .filter((k, v) -> v != null)
            // Source records are "ID:EVENT" under another key: re-keyed by
            // id, through a repartition topic.
            .map((k, v) -> KeyValue.pair(v.substring(0, v.indexOf(':')), v.substring(v.indexOf(':') + 1)))
            .repartition(Repartitioned.with(Serdes.String(), Serdes.String()).withName("by-id"))
            .process(() -> new EventProcessor(values, stats, failAfter, pauseAfter,
                pauseFile == null ? null : Path.of(pauseFile)), EventProcessor.STORE)
            .to(appId + "-sink", Produced.with(Serdes.String(), values));

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // A member killed with kill -9 leaves the group after 6 s, the
        // broker's least, not 45.
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        p.put(StreamsConfig.PROCESSING_EXCEPTION_HANDLER_GLOBAL_ENABLED_CONFIG, true);

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("thread died (" + rootMessage(e) + "): replaced; its open transaction aborts");
            return StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        streams.start();

        int[] until = exitWhen == null ? null : range(exitWhen);
        long deadline = System.nanoTime() + Duration.ofSeconds(90).toNanos();
        int doneAt = -1;
        int rc = 0;
        while (true) {
            if (streams.state() == KafkaStreams.State.ERROR || streams.state() == KafkaStreams.State.NOT_RUNNING) {
                System.out.println("error: Kafka Streams is " + streams.state());
                rc = 1;
                break;
            }
            if (exitAfterFirst && stats.punctuations() >= 1) {
                break;
            }
            if (stopFile != null && Files.exists(Path.of(stopFile))) {
                break;
            }
            if (until != null && doneAt < 0 && stats.deletedAll(until[0], until[1])) {
                doneAt = stats.punctuations();
            }
            if (doneAt >= 0 && stats.punctuations() >= doneAt + linger) {
                break;
            }
            if (System.nanoTime() > deadline) {
                System.out.println("error: not done after 90 s");
                rc = 1;
                break;
            }
            Thread.sleep(50);
        }
        // A clean close commits the open transaction (the last deletes).
        boolean closed = streams.close(CloseOptions.timeout(Duration.ofSeconds(30))
            .withGroupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP));
        if (!closed) {
            System.out.println("error: Kafka Streams did not close within 30 s");
            rc = 1;
        }
        System.out.println(stats.summary());
        return rc;
    }

    private static String rootMessage(Throwable e) {
        while (e.getCause() != null) {
            e = e.getCause();
        }
        return e.getMessage();
    }

    // ---------------------------------------------------------------- clients

    private static Properties clientProps(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        // A bootstrap that does not serve fails a tool within 20 s, not 60.
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 20000);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        return p;
    }

    private static KafkaProducer<String, String> producer(String bootstrap) {
        Properties p = clientProps(bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 20000);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 20000);
        p.remove(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG);
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    private static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, boolean committed) {
        Properties p = clientProps(bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, committed ? "read_committed" : "read_uncommitted");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    /** Every record of a topic up to its end (its last stable offset, read_committed), from FROM offsets. */
    private static List<ConsumerRecord<byte[], byte[]>> readAll(
            KafkaConsumer<byte[], byte[]> c, String topic, Map<Integer, Long> from) {
        List<TopicPartition> tps = new ArrayList<>();
        for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(10))) {
            tps.add(new TopicPartition(topic, pi.partition()));
        }
        c.assign(tps);
        Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(10));
        for (TopicPartition tp : tps) {
            Long start = from.get(tp.partition());
            if (start == null) {
                c.seekToBeginning(List.of(tp));
            } else {
                c.seek(tp, start);
            }
        }
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (tps.stream().anyMatch(tp -> c.position(tp) < end.get(tp))) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("reading " + topic + " to its end took over 20 s");
            }
            c.poll(Duration.ofMillis(200)).forEach(out::add);
        }
        return out;
    }

    private static String str(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    // ---------------------------------------------------------------- produce

    private static int produce(List<String> args) throws Exception {
        String bootstrap = args.get(0);
        String appId = args.get(1);
        String topic = appId + "-source";
        int[] r = range(args.get(2));
        boolean await = args.contains("--await");
        try (Admin admin = Admin.create(clientProps(bootstrap))) {
            for (String t : List.of(topic, appId + "-sink")) {
                try {
                    admin.createTopics(List.of(new NewTopic(t, 1, (short) 1))).all().get();
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) {
                        throw e;
                    }
                }
            }
        }
        int live = Integer.parseInt(java.util.Objects.requireNonNullElse(option(args, "--live"), "0"));
        try (KafkaProducer<String, String> prod = producer(bootstrap)) {
            for (int i = r[0]; i < r[1]; i++) {
                prod.send(new ProducerRecord<>(topic, "in-" + i, key(i) + ":event-" + i)).get();
            }
            for (int i = 0; i < live; i++) {
                prod.send(new ProducerRecord<>(topic, "in-live-" + i, EventProcessor.LIVE + i + ":event-kept-" + i)).get();
            }
        }
        System.out.println("produced " + (r[1] - r[0]) + " events to delete and " + live + " to keep to " + topic);
        return await ? awaitSink(bootstrap, appId + "-sink", r) : 0;
    }

    private static int await(List<String> args) throws Exception {
        return awaitSink(args.get(0), args.get(1) + "-sink", range(args.get(2)));
    }

    /** Until every key of the range is downstream, committed (read_committed). */
    private static int awaitSink(String bootstrap, String sink, int[] r) throws Exception {
        long t0 = System.nanoTime();
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, true)) {
            while (true) {
                Map<String, Integer> counts = counts(readAll(c, sink, Map.of()));
                boolean all = true;
                for (int i = r[0]; i < r[1]; i++) {
                    all &= counts.containsKey(key(i));
                }
                if (all) {
                    System.out.println("downstream, committed, after " + (System.nanoTime() - t0) / 1_000_000 + " ms");
                    return 0;
                }
                if (System.nanoTime() - t0 > Duration.ofSeconds(60).toNanos()) {
                    System.out.println("error: not all downstream after 60 s: " + counts);
                    return 1;
                }
                Thread.sleep(200);
            }
        }
    }

    /** Events (records with a value) per key; a tombstone is no event. */
    private static Map<String, Integer> counts(List<ConsumerRecord<byte[], byte[]>> records) {
        Map<String, Integer> counts = new TreeMap<>();
        for (ConsumerRecord<byte[], byte[]> rec : records) {
            if (rec.value() != null) {
                counts.merge(str(rec.key()), 1, Integer::sum);
            }
        }
        return counts;
    }

    // ---------------------------------------------------------------- sink

    /**
     * The sink's committed events per key (read_committed), and its
     * tombstones: with
     * {@code --since FILE}, only those after the end offsets a {@code --save
     * FILE} run wrote.
     */
    private static int sink(List<String> args) throws Exception {
        String bootstrap = args.get(0);
        String topic = args.get(1);
        String since = option(args, "--since");
        String save = option(args, "--save");
        Map<Integer, Long> from = new HashMap<>();
        if (since != null) {
            for (String line : Files.readAllLines(Path.of(since))) {
                String[] kv = line.split("=");
                from.put(Integer.parseInt(kv[0]), Long.parseLong(kv[1]));
            }
        }
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, true)) {
            List<ConsumerRecord<byte[], byte[]>> records = readAll(c, topic, from);
            if (save != null) {
                StringBuilder sb = new StringBuilder();
                for (TopicPartition tp : c.assignment()) {
                    sb.append(tp.partition()).append('=').append(c.position(tp)).append('\n');
                }
                Files.writeString(Path.of(save), sb.toString());
            }
            Map<String, Integer> counts = counts(records);
            long more = counts.values().stream().filter(n -> n > 1).count();
            List<String> again = new ArrayList<>();
            counts.forEach((k, n) -> {
                if (n > 1) {
                    again.add(k + "x" + n);
                }
            });
            System.out.println("more_than_once_keys " + String.join(",", again));
            long tombstones = records.stream().filter(rec -> rec.value() == null).count();
            System.out.println("sink records=" + records.size() + " keys=" + counts.size() + " more_than_once=" + more
                + " tombstones=" + tombstones);
        }
        return 0;
    }

    // ---------------------------------------------------------------- compact

    /**
     * Waits until the changelog is compacted as a restore will read it: each
     * key at most one record, and no tombstone left. Apache Kafka cleans
     * only closed segments and rolls one only when something is appended
     * after segment.ms: this appends a tombstone of a key no event has
     * ("~roll", a delete of nothing) every 300 ms, through the same
     * bootstrap as the application.
     */
    private static int compact(List<String> args) throws Exception {
        String bootstrap = args.get(0);
        String topic = args.get(1);
        long timeout = Long.parseLong(args.get(2));
        long t0 = System.nanoTime();
        try (KafkaProducer<String, String> prod = producer(bootstrap);
                KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, true)) {
            String last = "";
            while (true) {
                prod.send(new ProducerRecord<>(topic, "~roll", null)).get();
                List<ConsumerRecord<byte[], byte[]>> records = readAll(c, topic, Map.of());
                Map<String, Integer> perKey = new HashMap<>();
                int tombstones = 0;
                int values = 0;
                for (ConsumerRecord<byte[], byte[]> rec : records) {
                    String k = str(rec.key());
                    if ("~roll".equals(k)) {
                        continue;
                    }
                    perKey.merge(k, 1, Integer::sum);
                    if (rec.value() == null) {
                        tombstones++;
                    } else {
                        values++;
                    }
                }
                boolean once = perKey.values().stream().allMatch(n -> n == 1);
                last = "records=" + (tombstones + values) + " tombstones=" + tombstones + " values=" + values;
                long ms = (System.nanoTime() - t0) / 1_000_000;
                if (once && tombstones == 0) {
                    System.out.println("changelog compacted after " + ms + " ms: " + last);
                    return 0;
                }
                if (ms > timeout * 1000) {
                    System.out.println("error: changelog not compacted after " + timeout + " s: " + last);
                    return 1;
                }
                Thread.sleep(300);
            }
        }
    }

    // ---------------------------------------------------------------- plaintext

    /** Records of these topics, read at the broker itself, whose key or value holds an event's plaintext. */
    private static int plaintext(List<String> args) {
        String bootstrap = args.get(0);
        int total = 0;
        int plain = 0;
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, false)) {
            for (String topic : args.subList(1, args.size())) {
                for (ConsumerRecord<byte[], byte[]> rec : readAll(c, topic, Map.of())) {
                    total++;
                    String k = str(rec.key());
                    String v = str(rec.value());
                    if ((k != null && (k.contains("key-") || k.contains("live-") || k.contains("~roll") || k.startsWith("in-")))
                            || (v != null && v.contains("event-"))) {
                        plain++;
                    }
                }
            }
        }
        System.out.println("plaintext records=" + plain + " of=" + total);
        return 0;
    }

    // ---------------------------------------------------------------- tombstones

    /**
     * Tombstones in a topic's open transactions: at or past its last stable
     * offset (read_committed's end), read with read_uncommitted.
     */
    private static int tombstones(List<String> args) {
        String bootstrap = args.get(0);
        String topic = args.get(1);
        Map<Integer, Long> stable = new HashMap<>();
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, true)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(10))) {
                tps.add(new TopicPartition(topic, pi.partition()));
            }
            c.endOffsets(tps, Duration.ofSeconds(10)).forEach((tp, off) -> stable.put(tp.partition(), off));
        }
        int pending = 0;
        try (KafkaConsumer<byte[], byte[]> c = consumer(bootstrap, false)) {
            for (ConsumerRecord<byte[], byte[]> rec : readAll(c, topic, stable)) {
                if (rec.value() == null) {
                    pending++;
                }
            }
        }
        System.out.println("tombstones pending=" + pending);
        return 0;
    }
}
