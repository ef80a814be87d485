// Orders with kafkajs: the topic `orders` read from the start, each
// order's last state printed, then one more order written.
//
// Usage: node orders.js BOOTSTRAP [TOPIC]   (TOPIC: orders by default)
'use strict';

const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, topic = 'orders'] = process.argv.slice(2);

async function main() {
  const kafka = new Kafka({ brokers: [bootstrap], logLevel: logLevel.ERROR });

  // Each partition that holds records is read to its end.
  const admin = kafka.admin();
  await admin.connect();
  const left = new Set();
  for (const p of await admin.fetchTopicOffsets(topic)) {
    if (p.high !== p.low) left.add(p.partition);
  }
  await admin.disconnect();

  const state = new Map();
  const consumer = kafka.consumer({ groupId: 'orders-js' });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await new Promise((resolve, reject) => {
    consumer
      .run({
        autoCommit: false,
        eachBatch: async ({ batch }) => {
          for (const m of batch.messages) state.set(m.key.toString(), m.value);
          const last = batch.messages[batch.messages.length - 1];
          if (last && BigInt(last.offset) + 1n >= BigInt(batch.highWatermark)) left.delete(batch.partition);
          if (left.size === 0) resolve();
        },
      })
      .catch(reject);
  });
  await consumer.disconnect();

  for (const id of [...state.keys()].sort()) {
    const value = state.get(id);
    console.log(value === null ? `node: ${id} deleted` : `node: ${id} = ${value}`);
  }

  const producer = kafka.producer();
  await producer.connect();
  await producer.send({
    topic,
    messages: [{ key: 'order-5', value: JSON.stringify({ item: 'chair', qty: 4 }) }],
  });
  await producer.disconnect();
  console.log('node: wrote order-5');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
