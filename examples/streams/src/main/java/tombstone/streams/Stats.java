package tombstone.streams;

import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.streams.KeyValue;

/** What this process's punctuations saw and did, shared with the main thread. */
final class Stats {
    private final Set<String> deleted = new TreeSet<>();
    private final Set<String> seenAfterDelete = new TreeSet<>();
    private final Set<String> abortedDeletes = new TreeSet<>();
    private final Set<String> seenAfterAbort = new TreeSet<>();
    private int punctuations;
    private int stored;
    private int firstSeen = -1;
    private int firstGetNull = -1;
    private int firstLive = -1;
    private boolean reportAbort;
    private Set<String> firstKeys = new TreeSet<>();

    synchronized void stored(String key) {
        stored++;
    }

    synchronized void punctuation(List<KeyValue<String, String>> seen, int getNull) {
        punctuations++;
        for (KeyValue<String, String> kv : seen) {
            // A key seen again after this process deleted it (a delete
            // that no abort undid).
            if (deleted.contains(kv.key) && !abortedDeletes.contains(kv.key)) {
                seenAfterDelete.add(kv.key);
            }
            if (abortedDeletes.contains(kv.key)) {
                seenAfterAbort.add(kv.key);
            }
        }
        if (firstSeen < 0) {
            firstSeen = 0;
            firstLive = 0;
            firstGetNull = getNull;
            for (KeyValue<String, String> kv : seen) {
                if (kv.key.startsWith(EventProcessor.LIVE)) {
                    firstLive++;
                } else {
                    firstSeen++;
                    firstKeys.add(kv.key);
                }
            }
        }
        System.out.println("punctuation " + punctuations + ": all() yields " + seen.size()
            + " keys, get() answers null for " + getNull + " of them");
        // Reported once every key of the aborted deletes is seen again:
        // each task punctuates on its own, and the first punctuation after
        // the abort may be another task's, which holds none of them. (A
        // pause reports it as it stands, if it comes first.)
        if (reportAbort && seenAfterAbort.containsAll(abortedDeletes)) {
            reportAbort();
        }
    }

    private void reportAbort() {
        reportAbort = false;
        System.out.println("after the abort: back=" + seenAfterAbort.size() + " of=" + abortedDeletes.size()
            + " committed_deletes_back=" + seenAfterDelete.size());
    }

    synchronized void deleted(String key) {
        deleted.add(key);
    }

    synchronized void abortedDeletes(List<String> keys) {
        for (String k : keys) {
            abortedDeletes.add(k);
            deleted.remove(k);
        }
        reportAbort = true;
        System.out.println("fault: thrown after deletes=" + keys.size() + ", before their commit");
    }

    synchronized void pausedDeletes(List<String> keys) {
        if (reportAbort) {
            reportAbort();
        }
        System.out.println("fault: paused after deletes=" + keys.size() + ", before their commit");
    }

    synchronized boolean deletedAll(int from, int to) {
        for (int i = from; i < to; i++) {
            if (!deleted.contains(Demo.key(i))) {
                return false;
            }
        }
        return true;
    }

    synchronized int punctuations() {
        return punctuations;
    }

    synchronized String summary() {
        return "summary punctuations=" + punctuations
            + " stored=" + stored
            + " deleted=" + deleted.size()
            + " first_seen=" + Math.max(firstSeen, 0)
            + " first_get_null=" + Math.max(firstGetNull, 0)
            + " first_live=" + Math.max(firstLive, 0)
            + " seen_after_delete=" + seenAfterDelete.size()
            + " aborted_deletes=" + abortedDeletes.size()
            + " seen_after_abort=" + seenAfterAbort.size()
            + "\nfirst_keys " + String.join(",", firstKeys)
            + "\nseen_after_delete_keys " + String.join(",", seenAfterDelete);
    }
}
