// Writes transactions with KafkaJS's transactional producer, then reads the topic back with KafkaJS
// consumers at both isolation levels, and prints what was acknowledged and what each consumer read.
//
// The transactions are given on stdin (JSON): [{"commit": true, "messages": [{"partition": 0,
// "value": "..."}, ...]}, ...], each sent with producer.transaction(), transaction.send (one send
// per message) and transaction.commit() or abort(). The last transaction must commit the last
// message of each partition, its value ending in "-end-<partition>": a consumer has read its
// partition once it reads that message, everything before it having come in offset order.
//
// usage: node transactions.js <bootstrap> <topic> <partitions> <transactional id> < transactions.json
// prints {"delivered": [{"partition", "offset", "value"}...],
//         "committed": [{"partition", "offset", "value"}...], "uncommitted": [...]}
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, partitionCount, transactionalId] = process.argv.slice(2)

async function readStdin() {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  return JSON.parse(Buffer.concat(chunks).toString())
}

async function produce(kafka, transactions) {
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const delivered = []
  for (const spec of transactions) {
    const transaction = await producer.transaction()
    for (const m of spec.messages) {
      const [result] = await transaction.send({ topic, acks: -1, messages: [{ partition: m.partition, value: m.value }] })
      delivered.push({ partition: result.partition, offset: Number(result.baseOffset), value: m.value })
    }
    if (spec.commit) await transaction.commit()
    else await transaction.abort()
  }
  await producer.disconnect()
  return delivered
}

async function consume(kafka, readUncommitted) {
  const consumer = kafka.consumer({ groupId: `txn-reader-${readUncommitted}-${process.pid}`, readUncommitted,
                                    heartbeatInterval: 500, maxWaitTimeInMs: 100 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const consumed = []
  const ended = new Set()
  await new Promise((resolve, reject) => {
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        const value = message.value.toString()
        consumed.push({ partition, offset: Number(message.offset), value })
        if (value.endsWith(`-end-${partition}`)) ended.add(partition)
        if (ended.size === Number(partitionCount)) resolve()
      },
    }).catch(reject)
  })
  await consumer.disconnect()
  return consumed
}

async function main() {
  const kafka = new Kafka({ clientId: 'kraftwerk-transactions', brokers: bootstrap.split(','), logLevel: logLevel.ERROR })
  const delivered = await produce(kafka, await readStdin())
  const committed = await consume(kafka, false)
  const uncommitted = await consume(kafka, true)
  process.stdout.write(JSON.stringify({ delivered, committed, uncommitted }))
}

main().catch(err => { console.error(err); process.exit(1) })
