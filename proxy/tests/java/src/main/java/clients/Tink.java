package clients;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import javax.crypto.Cipher;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.SecretKeySpec;

/**
 * What a reader beside the proxy needs of Tink's format, written here from
 * docs/FORMAT.md with the JDK's own AES-GCM: a cleartext JSON keyset's
 * enabled keys, the associated data of a value (TopicAndKey) and a key
 * (Topic), and a value's decryption. Record keys (AES-SIV, which the JDK
 * lacks) are checked by their shape: the version byte, the key keyset's key
 * id, 21 bytes more than the plaintext.
 */
final class Tink {
  private Tink() {}

  /** The enabled keys of a keyset file: id to key bytes, and the primary's id. */
  static final class Keyset {
    final int primary;
    final Map<Integer, byte[]> keys;

    Keyset(int primary, Map<Integer, byte[]> keys) {
      this.primary = primary;
      this.keys = keys;
    }

    /** The enabled key ids other than the primary: the older keys of a rotation. */
    List<Integer> older() {
      List<Integer> out = new ArrayList<>();
      for (int id : keys.keySet()) {
        if (id != primary) out.add(id);
      }
      return out;
    }
  }

  /**
   * Reads a Tink cleartext JSON keyset. The key material is the serialized
   * key proto: [08 00 (version 0)] then field 3 (0x1a LEN key) for AES-GCM,
   * field 2 (0x12 LEN key) for AES-SIV; the bytes after the tag and length
   * are the key.
   */
  static Keyset read(Path path) throws Exception {
    Object json = new Json(Files.readString(path, StandardCharsets.UTF_8)).value();
    @SuppressWarnings("unchecked")
    Map<String, Object> keyset = (Map<String, Object>) json;
    int primary = ((Number) keyset.get("primaryKeyId")).intValue();
    Map<Integer, byte[]> keys = new LinkedHashMap<>();
    for (Object o : (List<?>) keyset.get("key")) {
      Map<?, ?> key = (Map<?, ?>) o;
      if (!"ENABLED".equals(key.get("status"))) continue;
      Map<?, ?> data = (Map<?, ?>) key.get("keyData");
      byte[] proto = Base64.getDecoder().decode((String) data.get("value"));
      int i = proto[0] == 0x08 ? 2 : 0;
      int len = proto[i + 1] & 0xff;
      byte[] k = new byte[len];
      System.arraycopy(proto, i + 2, k, 0, len);
      keys.put(((Number) key.get("keyId")).intValue(), k);
    }
    return new Keyset(primary, keys);
  }

  private static byte[] u32(int n) {
    return ByteBuffer.allocate(4).putInt(n).array();
  }

  /** The Topic associated data: u32be(len) | topic | 0x00. */
  static byte[] topicAd(String topic) {
    byte[] t = topic.getBytes(StandardCharsets.UTF_8);
    return ByteBuffer.allocate(5 + t.length).put(u32(t.length)).put(t).put((byte) 0).array();
  }

  /** A value's associated data: TopicAndKey, or Topic for a record without a key. */
  static byte[] valueAd(String topic, byte[] key) {
    if (key == null) return topicAd(topic);
    byte[] t = topic.getBytes(StandardCharsets.UTF_8);
    return ByteBuffer.allocate(9 + t.length + key.length)
        .put(u32(t.length))
        .put(t)
        .put((byte) 1)
        .put(u32(key.length))
        .put(key)
        .array();
  }

  /** The key id of a ciphertext (bytes 1..5, after the version byte 0x01). */
  static int keyId(byte[] ct) {
    return ByteBuffer.wrap(ct, 1, 4).getInt();
  }

  /** Decrypts 0x01 | key id | nonce (12) | ciphertext | tag (16). */
  static byte[] decrypt(Keyset keyset, byte[] ct, byte[] ad) throws Exception {
    if (ct.length < 33 || ct[0] != 1) throw new Exception("not a ciphertext");
    byte[] key = keyset.keys.get(keyId(ct));
    if (key == null) throw new Exception("unknown key id " + keyId(ct));
    Cipher c = Cipher.getInstance("AES/GCM/NoPadding");
    c.init(Cipher.DECRYPT_MODE, new SecretKeySpec(key, "AES"), new GCMParameterSpec(128, ct, 5, 12));
    c.updateAAD(ad);
    return c.doFinal(ct, 17, ct.length - 17);
  }

  /** A small JSON reader: objects, arrays, strings, numbers, true, false, null. */
  private static final class Json {
    private final String s;
    private int i;

    Json(String s) {
      this.s = s;
    }

    Object value() {
      skip();
      char c = s.charAt(i);
      switch (c) {
        case '{': {
          i++;
          Map<String, Object> m = new HashMap<>();
          skip();
          if (s.charAt(i) == '}') {
            i++;
            return m;
          }
          while (true) {
            skip();
            String k = string();
            skip();
            expect(':');
            m.put(k, value());
            skip();
            if (s.charAt(i) == ',') {
              i++;
              continue;
            }
            expect('}');
            return m;
          }
        }
        case '[': {
          i++;
          List<Object> l = new ArrayList<>();
          skip();
          if (s.charAt(i) == ']') {
            i++;
            return l;
          }
          while (true) {
            l.add(value());
            skip();
            if (s.charAt(i) == ',') {
              i++;
              continue;
            }
            expect(']');
            return l;
          }
        }
        case '"':
          return string();
        default:
          if (s.startsWith("true", i)) {
            i += 4;
            return Boolean.TRUE;
          }
          if (s.startsWith("false", i)) {
            i += 5;
            return Boolean.FALSE;
          }
          if (s.startsWith("null", i)) {
            i += 4;
            return null;
          }
          int start = i;
          while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
          return Long.parseLong(s.substring(start, i));
      }
    }

    private String string() {
      expect('"');
      StringBuilder b = new StringBuilder();
      while (s.charAt(i) != '"') {
        char c = s.charAt(i++);
        if (c == '\\') {
          char e = s.charAt(i++);
          switch (e) {
            case 'n': b.append('\n'); break;
            case 't': b.append('\t'); break;
            case 'r': b.append('\r'); break;
            case 'b': b.append('\b'); break;
            case 'f': b.append('\f'); break;
            case 'u':
              b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
              i += 4;
              break;
            default: b.append(e);
          }
        } else {
          b.append(c);
        }
      }
      i++;
      return b.toString();
    }

    private void skip() {
      while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++;
    }

    private void expect(char c) {
      if (s.charAt(i) != c) throw new IllegalArgumentException("JSON: expected " + c + " at " + i);
      i++;
    }
  }
}
