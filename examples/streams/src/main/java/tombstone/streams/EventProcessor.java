package tombstone.streams;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The report's application: each event is stored under its id; a
 * wall-clock Punctuator iterates the store with {@code all()}, sends each
 * stored event downstream and then deletes it, with {@code put(key, null)}
 * for even ids (the delete goes through the value serde) and
 * {@code delete(key)} for odd ones (it does not).
 *
 * <p>The store holds bytes, and every value goes through the value serde
 * here, a null too: Kafka Streams 3.x's typed stores did that
 * ({@code put(key, null)} called the value serializer with the null; 3.9.1's
 * {@code MeteredKeyValueStore}), 4.x's do not (4.4.0's turns a null into a
 * delete before its serde). So the naive serde meets the null of a
 * {@code put(key, null)} as the report's did; {@code delete(key)} never
 * reaches a serde in either.
 *
 * <p>Two faults on request: {@code failAfter} throws once, right after the
 * deletes of the punctuation that deleted that key, so the thread dies and
 * the exactly-once transaction holding those deletes aborts (the thread is
 * replaced and restores from the changelog); {@code pauseAfter} writes a
 * file and sleeps right after the deletes of the punctuation that deleted
 * that key, before any commit, for the script's {@code kill -9}.
 */
final class EventProcessor implements Processor<String, String, String, String> {
    static final String STORE = "events";
    /** Keys of events the application keeps (never sent or deleted). */
    static final String LIVE = "live-";
    /** Set once the fault {@code failAfter} has been thrown, for the whole JVM. */
    static final AtomicBoolean FAILED_ONCE = new AtomicBoolean();

    private final Stats stats;
    private final String failAfter;
    private final String pauseAfter;
    private final Path pauseFile;
    private final Serde<String> values;
    private String topic;
    private ProcessorContext<String, String> context;
    private KeyValueStore<String, byte[]> store;

    EventProcessor(Serde<String> values, Stats stats, String failAfter, String pauseAfter, Path pauseFile) {
        this.values = values;
        this.stats = stats;
        this.failAfter = failAfter;
        this.pauseAfter = pauseAfter;
        this.pauseFile = pauseFile;
    }

    @Override
    public void init(ProcessorContext<String, String> context) {
        this.context = context;
        this.store = context.getStateStore(STORE);
        this.topic = context.applicationId() + "-" + STORE + "-changelog";
        context.schedule(Duration.ofMillis(500), PunctuationType.WALL_CLOCK_TIME, this::punctuate);
    }

    @Override
    public void process(Record<String, String> record) {
        put(record.key(), record.value());
        stats.stored(record.key());
    }

    /** The store's typed put: the value serde sees every value, a null too. */
    private void put(String key, String value) {
        store.put(key, values.serializer().serialize(topic, value));
    }

    private String get(String key) {
        return values.deserializer().deserialize(topic, store.get(key));
    }

    static boolean deletedByPutNull(String key) {
        int i = key.length() - 1;
        while (i >= 0 && Character.isDigit(key.charAt(i))) {
            i--;
        }
        return i < key.length() - 1 && Integer.parseInt(key.substring(i + 1)) % 2 == 0;
    }

    private void punctuate(long now) {
        List<KeyValue<String, String>> seen = new ArrayList<>();
        try (KeyValueIterator<String, byte[]> it = store.all()) {
            it.forEachRemaining(kv -> seen.add(KeyValue.pair(kv.key, values.deserializer().deserialize(topic, kv.value))));
        }
        // What a get() answers for the keys all() yields: the naive serde
        // answers null for every key it "deleted" with put(key, null).
        int getNull = 0;
        for (KeyValue<String, String> kv : seen) {
            if (get(kv.key) == null) {
                getNull++;
            }
        }
        stats.punctuation(seen, getNull);
        boolean fail = false;
        boolean pause = false;
        List<String> deletes = new ArrayList<>();
        for (KeyValue<String, String> kv : seen) {
            if (kv.key.startsWith(LIVE)) {
                // An event the application keeps: the restore must bring it back.
                continue;
            }
            // Send downstream, then delete.
            context.forward(new Record<>(kv.key, kv.value, now));
            if (deletedByPutNull(kv.key)) {
                put(kv.key, null);
            } else {
                store.delete(kv.key);
            }
            stats.deleted(kv.key);
            deletes.add(kv.key);
            fail |= kv.key.equals(failAfter);
            pause |= kv.key.equals(pauseAfter);
        }
        if (fail && FAILED_ONCE.compareAndSet(false, true)) {
            stats.abortedDeletes(deletes);
            throw new IllegalStateException(
                "streams demo: a fault after " + deletes.size() + " deletes, before their commit: the transaction aborts");
        }
        if (pause) {
            try {
                // The producer sends the open transaction's records (sink
                // sends, changelog deletes) within its linger; then the
                // script is told, and kills this JVM before any commit.
                Thread.sleep(1000);
                stats.pausedDeletes(deletes);
                Files.writeString(pauseFile, deletes.size() + "\n");
                Thread.sleep(600_000);
            } catch (InterruptedException | IOException e) {
                throw new IllegalStateException(e);
            }
        }
    }
}
