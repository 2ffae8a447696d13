// Consumes <count> messages of <topic> as a member of <group> with KafkaJS's Consumer,
// commits exactly the offsets it processed, leaves the group and prints what it read.
// usage: node group.js <bootstrap> <topic> <group> <count>
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, group, count] = process.argv.slice(2)

async function main() {
  const kafka = new Kafka({ clientId: 'kraftwerk-group', brokers: bootstrap.split(','), logLevel: logLevel.ERROR })
  const consumer = kafka.consumer({ groupId: group, heartbeatInterval: 500 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const consumed = []
  await new Promise((resolve, reject) => {
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (consumed.length >= Number(count)) return
        consumed.push({ partition, offset: Number(message.offset), key: message.key.toString() })
        await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }])
        if (consumed.length === Number(count)) resolve()
      },
    }).catch(reject)
  })
  await consumer.disconnect()
  process.stdout.write(JSON.stringify(consumed))
}

main().catch(err => { console.error(err); process.exit(1) })
