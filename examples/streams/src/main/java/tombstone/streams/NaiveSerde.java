package tombstone.streams;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.Arrays;
import javax.crypto.Cipher;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.SecretKeySpec;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serializer;

/**
 * The broken layer of the report, on purpose: an encrypting String serde
 * (AES-256-GCM, a random 96-bit nonce before the ciphertext) that encrypts
 * a null as the ciphertext of nothing, and reads the ciphertext of nothing
 * back as null.
 *
 * <p>So {@code put(key, null)} writes a present value to the store and a
 * record with a value to the changelog, {@code get(key)} answers null (the
 * delete looks done), {@code all()} still yields the key, compaction keeps
 * it and a restore brings it back. Never use this: it is the negative
 * control of scripts/streams-demo.sh. Its key is a fixed demo key.
 */
public final class NaiveSerde implements Serde<String> {
    private static final int NONCE = 12;
    private static final int TAG_BITS = 128;
    private final SecretKeySpec key;
    private final SecureRandom random = new SecureRandom();

    public NaiveSerde() {
        try {
            byte[] k = MessageDigest.getInstance("SHA-256")
                .digest("tombstone-crypt streams demo: a naive layer's key".getBytes(StandardCharsets.UTF_8));
            this.key = new SecretKeySpec(k, "AES");
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    @Override
    public Serializer<String> serializer() {
        return (topic, value) -> {
            // The bug: a null is encrypted like any value, as an empty payload.
            byte[] plain = value == null ? new byte[0] : value.getBytes(StandardCharsets.UTF_8);
            try {
                byte[] nonce = new byte[NONCE];
                random.nextBytes(nonce);
                Cipher c = Cipher.getInstance("AES/GCM/NoPadding");
                c.init(Cipher.ENCRYPT_MODE, key, new GCMParameterSpec(TAG_BITS, nonce));
                byte[] ct = c.doFinal(plain);
                byte[] out = Arrays.copyOf(nonce, NONCE + ct.length);
                System.arraycopy(ct, 0, out, NONCE, ct.length);
                return out;
            } catch (GeneralSecurityException e) {
                throw new SerializationException("naive serde: encryption failed", e);
            }
        };
    }

    @Override
    public Deserializer<String> deserializer() {
        return (topic, data) -> {
            if (data == null) {
                return null;
            }
            if (data.length < NONCE) {
                throw new SerializationException("naive serde: too short");
            }
            try {
                Cipher c = Cipher.getInstance("AES/GCM/NoPadding");
                c.init(Cipher.DECRYPT_MODE, key, new GCMParameterSpec(TAG_BITS, data, 0, NONCE));
                byte[] plain = c.doFinal(data, NONCE, data.length - NONCE);
                // The other half of the bug: the ciphertext of nothing reads as
                // the null it was written for, so get(key) looks deleted.
                return plain.length == 0 ? null : new String(plain, StandardCharsets.UTF_8);
            } catch (GeneralSecurityException e) {
                throw new SerializationException("naive serde: decryption failed", e);
            }
        };
    }
}
