// Produces <count> messages to partition 0 of <topic> over TLS with KafkaJS's producer, then reads
// them back as a member of <group>, and prints what was acknowledged and what was read.
// The client trusts the CA in <ca.pem>; with <cert.pem> <key.pem> it presents that certificate
// (mutual TLS).
// usage: node tls.js <bootstrap> <topic> <group> <count> <ca.pem> [<cert.pem> <key.pem>]
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, group, count, ca, cert, key] = process.argv.slice(2)

async function main() {
  const ssl = { ca: [fs.readFileSync(ca, 'utf-8')] }
  if (cert) Object.assign(ssl, { cert: fs.readFileSync(cert, 'utf-8'), key: fs.readFileSync(key, 'utf-8') })
  const kafka = new Kafka({ clientId: 'kraftwerk-tls', brokers: bootstrap.split(','), ssl, logLevel: logLevel.ERROR })
  const producer = kafka.producer()
  await producer.connect()
  const delivered = []
  for (let i = 0; i < Number(count); i++) {
    const [result] = await producer.send({
      topic, acks: -1, messages: [{ partition: 0, key: `kafkajs-key-${i}`, value: `kafkajs value ${i}` }],
    })
    delivered.push({ partition: result.partition, offset: Number(result.baseOffset) })
  }
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: group, heartbeatInterval: 500 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const consumed = []
  await new Promise((resolve, reject) => {
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        consumed.push({ partition, offset: Number(message.offset), key: message.key.toString(),
                        value: message.value.toString() })
        if (consumed.length === Number(count)) resolve()
      },
    }).catch(reject)
  })
  await consumer.disconnect()
  process.stdout.write(JSON.stringify({ delivered, consumed }))
}

main().catch(err => { console.error(err); process.exit(1) })
