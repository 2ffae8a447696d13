// Logs in with SASL (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) as KafkaJS does (SaslHandshake v1,
// SaslAuthenticate), produces <count> messages to partition 0 of <topic>, reads them back as a
// member of a group, and prints [{offset, value}]. A refused login prints {"error": name,
// "message": ...} and exits with status 1.
// With <ca file>, over TLS (SASL_SSL) trusting that CA.
// usage: node sasl.js <bootstrap> <topic> <mechanism> <user> <password> <count> [<ca file>]
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, mechanism, username, password, count, caFile] = process.argv.slice(2)

async function main() {
  const kafka = new Kafka({
    clientId: 'kraftwerk-sasl', brokers: bootstrap.split(','), logLevel: logLevel.NOTHING,
    sasl: { mechanism: mechanism.toLowerCase(), username, password },
    retry: { retries: 0 },
    ssl: caFile ? { ca: [fs.readFileSync(caFile, 'utf-8')] } : false,
  })
  const producer = kafka.producer()
  await producer.connect()
  for (let i = 0; i < Number(count); i++) {
    await producer.send({ topic, acks: -1, messages: [{ partition: 0, value: `kafkajs ${mechanism} ${i}` }] })
  }
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: `sasl-${topic}`, heartbeatInterval: 500 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const consumed = []
  await new Promise((resolve, reject) => {
    consumer.run({
      eachMessage: async ({ message }) => {
        consumed.push({ offset: Number(message.offset), value: message.value.toString() })
        if (consumed.length === Number(count)) resolve()
      },
    }).catch(reject)
  })
  await consumer.disconnect()
  process.stdout.write(JSON.stringify(consumed))
}

main().catch(err => {
  process.stdout.write(JSON.stringify({ error: err.name, message: err.message }))
  process.exit(1)
})
