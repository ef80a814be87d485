// kafkajs (the pure-JavaScript Kafka client) through the tombstone-crypt
// proxy, checked beside it with Node's own AES-GCM.
//
// Usage:
//   node kafkajs_clients.js PROXY BROKER PREFIX VALUE_KEYSET KEY_KEYSET CODECS
//   node kafkajs_clients.js PROXY BROKER PREFIX VALUE_KEYSET KEY_KEYSET compaction-write
//   node kafkajs_clients.js PROXY BROKER PREFIX VALUE_KEYSET KEY_KEYSET compaction-read
//
// For each codec of CODECS (none, gzip: kafkajs's built-in codecs), the
// topic PREFIX + codec (two partitions, created beforehand: kafkajs's
// idempotent producer and topic creation are not what this tests) gets
// keyed and unkeyed records, tombstones and empty values from a producer
// through the proxy (acks=-1, one batch per partition); a consumer group
// through the proxy must read exactly what was sent and commit its
// offsets; a consumer group beside the proxy must see every value as a
// Tink AES-GCM ciphertext (decrypted here from the keyset's JSON with the
// TopicAndKey associated data of docs/FORMAT.md), every key as a
// ciphertext of the key keyset (21 bytes more, version byte 1), every
// tombstone null. compaction-write writes several versions of four keys
// through the proxy to the compacted topic PREFIX + "compaction" (one
// partition, created beforehand), one key ending on a tombstone, one on an
// empty value; the test then has Apache Kafka's log cleaner compact it, and
// compaction-read reads it through the proxy: each key's last record only,
// the tombstone null, the empty value empty. Prints {"ok": true, ...};
// exits 1 naming the first difference.
'use strict';

const fs = require('fs');
const crypto = require('crypto');
const { Kafka, CompressionTypes, logLevel } = require('kafkajs');

class Failed extends Error {}

const [proxy, broker, prefix, valueKeysetPath, keyKeysetPath, codecs] = process.argv.slice(2);

// The enabled AES-GCM keys of a Tink cleartext JSON keyset, by key id.
function gcmKeys(path) {
  const keyset = JSON.parse(fs.readFileSync(path, 'utf8'));
  const keys = new Map();
  for (const k of keyset.key) {
    if (k.status !== 'ENABLED') continue;
    const proto = Buffer.from(k.keyData.value, 'base64');
    // AesGcmKey: [08 00 (version 0)] 1a LEN key
    let i = proto[0] === 0x08 ? 2 : 0;
    if (proto[i] !== 0x1a) throw new Failed(`key ${k.keyId}: not an AesGcmKey`);
    keys.set(k.keyId >>> 0, proto.subarray(i + 2, i + 2 + proto[i + 1]));
  }
  return keys;
}

function u32(n) {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

function topicAd(topic) {
  const t = Buffer.from(topic, 'utf8');
  return Buffer.concat([u32(t.length), t, Buffer.from([0])]);
}

function valueAd(topic, key) {
  if (key === null) return topicAd(topic);
  const t = Buffer.from(topic, 'utf8');
  return Buffer.concat([u32(t.length), t, Buffer.from([1]), u32(key.length), key]);
}

// 0x01 | key id | nonce (12) | ciphertext | tag (16)
function decrypt(keys, ct, ad) {
  if (ct.length < 33 || ct[0] !== 1) throw new Failed('not a ciphertext');
  const key = keys.get(ct.readUInt32BE(1));
  if (!key) throw new Failed('unknown key id');
  const d = crypto.createDecipheriv(key.length === 32 ? 'aes-256-gcm' : 'aes-128-gcm', key, ct.subarray(5, 17));
  d.setAAD(ad);
  d.setAuthTag(ct.subarray(ct.length - 16));
  return Buffer.concat([d.update(ct.subarray(17, ct.length - 16)), d.final()]);
}

function records() {
  const out = [];
  for (let i = 0; i < 40; i++) {
    const key = i % 4 === 3 ? null : Buffer.from(`key-${i % 6}`);
    let value;
    if (i % 5 === 2) value = null;
    else if (i % 7 === 4) value = Buffer.alloc(0);
    else value = Buffer.from(`value ${i} `.repeat(1 + (i % 9)));
    out.push({ partition: i % 2, key, value });
  }
  return out;
}

function same(a, b) {
  if (a === null || b === null) return a === b;
  return Buffer.compare(a, b) === 0;
}

async function read(kafka, topic, groupId, expected, commit) {
  const consumer = kafka.consumer({ groupId, sessionTimeout: 6000, heartbeatInterval: 500 });
  const got = { 0: [], 1: [] };
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    let failure = null;
    consumer.on(consumer.events.CRASH, (e) => { failure = e.payload.error; });
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        got[partition].push([message.key, message.value]);
      },
    });
    const deadline = Date.now() + 60000;
    while (got[0].length + got[1].length < expected) {
      if (failure) throw new Failed(`${topic}: consume error via ${groupId}: ${failure.message}`);
      if (Date.now() > deadline) throw new Failed(`${topic}: read ${got[0].length + got[1].length} of ${expected} within 60 s (${groupId})`);
      await new Promise((r) => setTimeout(r, 100));
    }
    if (commit) {
      await consumer.commitOffsets([0, 1].map((p) => ({ topic, partition: p, offset: String(got[p].length) })));
    }
  } finally {
    await consumer.disconnect();
  }
  return got;
}

// Several versions of four keys, round by round: k1 ends on a tombstone,
// k2 on an empty value.
function versions() {
  const table = [
    ['k0', ['v0-a', 'v0-b', 'v0-c']],
    ['k1', ['v1-a', 'v1-b', null]],
    ['k2', ['v2-a', '']],
    ['k3', ['v3-a', 'v3-b']],
  ];
  const out = [];
  for (let r = 0; r < 3; r++) {
    for (const [key, vs] of table) {
      if (r < vs.length) out.push({ partition: 0, key: Buffer.from(key), value: vs[r] === null ? null : Buffer.from(vs[r]) });
    }
  }
  return out;
}

function show(recs) {
  return recs.map(([k, v]) => `${k}=${v === null ? 'null' : JSON.stringify(v.toString())}`).join(' ');
}

async function compaction(through, phase) {
  const topic = `${prefix}compaction`;
  const recs = versions();
  if (phase === 'compaction-write') {
    const producer = through.producer({ allowAutoTopicCreation: false });
    await producer.connect();
    try {
      await producer.send({ topic, acks: -1, messages: recs });
    } catch (e) {
      throw new Failed(`${topic}: produce through the proxy: ${e.message}`);
    } finally {
      await producer.disconnect();
    }
    return;
  }
  // Each key's last record, in offset order: an older record left would be
  // read before them.
  const want = recs.filter((r, i) => recs.slice(i + 1).every((l) => !same(l.key, r.key))).map((r) => [r.key, r.value]);
  const got = (await read(through, topic, `${topic}-group`, want.length, false))[0];
  if (got.length !== want.length || !want.every(([k, v], i) => same(k, got[i][0]) && same(v, got[i][1]))) {
    throw new Failed(`${topic} (compacted) read through the proxy: ${show(got)}, not each key's last record ${show(want)}`);
  }
}

async function main() {
  if (codecs.startsWith('compaction-')) {
    await compaction(new Kafka({ clientId: 'px-kafkajs', brokers: [proxy], logLevel: logLevel.NOTHING }), codecs);
    console.log(JSON.stringify({ ok: true, client: 'kafkajs', phase: codecs }));
    return;
  }
  const values = gcmKeys(valueKeysetPath);
  JSON.parse(fs.readFileSync(keyKeysetPath, 'utf8'));
  const recs = records();
  const sent = { 0: [], 1: [] };
  for (const r of recs) sent[r.partition].push([r.key, r.value]);
  const through = new Kafka({ clientId: 'px-kafkajs', brokers: [proxy], logLevel: logLevel.NOTHING });
  const beside = new Kafka({ clientId: 'px-kafkajs-beside', brokers: [broker], logLevel: logLevel.NOTHING });
  for (const codec of codecs.split(',')) {
    const topic = `${prefix}${codec}`;
    const producer = through.producer({ allowAutoTopicCreation: false });
    await producer.connect();
    try {
      await producer.send({
        topic,
        acks: -1,
        compression: codec === 'gzip' ? CompressionTypes.GZIP : CompressionTypes.None,
        messages: recs.map((r) => ({ partition: r.partition, key: r.key, value: r.value })),
      });
    } catch (e) {
      throw new Failed(`${topic}: produce through the proxy: ${e.message}`);
    } finally {
      await producer.disconnect();
    }
    const direct = await read(beside, topic, `${topic}-beside`, recs.length, false);
    for (const p of [0, 1]) {
      if (direct[p].length !== sent[p].length) throw new Failed(`${topic}-${p}: ${direct[p].length} records on the broker, ${sent[p].length} sent`);
      sent[p].forEach(([key, value], i) => {
        const [wireKey, wireValue] = direct[p][i];
        const where = `${topic}-${p} record ${i}`;
        if (value === null) {
          if (wireValue !== null) throw new Failed(`${where}: a tombstone reached the broker as a value`);
        } else {
          if (wireValue === null) throw new Failed(`${where}: a value reached the broker as a tombstone`);
          if (wireValue.length !== value.length + 33 || wireValue[0] !== 1) throw new Failed(`${where}: the value on the broker is not a ciphertext`);
          let pt;
          try {
            pt = decrypt(values, wireValue, valueAd(topic, key));
          } catch (e) {
            throw new Failed(`${where}: the value does not decrypt: ${e.message}`);
          }
          if (!same(pt, value)) throw new Failed(`${where}: the value decrypts to another value`);
        }
        if (key === null) {
          if (wireKey !== null) throw new Failed(`${where}: a null key became a key`);
        } else if (wireKey === null || wireKey.length !== key.length + 21 || wireKey[0] !== 1) {
          throw new Failed(`${where}: the key on the broker is not a ciphertext`);
        }
      });
    }
    const group = `${topic}-group`;
    const back = await read(through, topic, group, recs.length, true);
    for (const p of [0, 1]) {
      if (back[p].length !== sent[p].length || !sent[p].every(([k, v], i) => same(k, back[p][i][0]) && same(v, back[p][i][1]))) {
        throw new Failed(`${topic}: read through the proxy, the records differ from those sent`);
      }
    }
    const admin = through.admin();
    await admin.connect();
    try {
      const offsets = await admin.fetchOffsets({ groupId: group, topics: [topic] });
      const committed = {};
      for (const o of offsets[0].partitions) committed[o.partition] = Number(o.offset);
      if (committed[0] !== sent[0].length || committed[1] !== sent[1].length) {
        throw new Failed(`${topic}: committed offsets ${JSON.stringify(committed)} through the proxy`);
      }
    } finally {
      await admin.disconnect();
    }
  }
  console.log(JSON.stringify({ ok: true, client: 'kafkajs', codecs: codecs.split(',') }));
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`FAILED: ${e instanceof Failed ? e.message : e.stack}`);
    process.exit(1);
  },
);
