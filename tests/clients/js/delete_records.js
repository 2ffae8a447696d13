// Deletes the records of <topic>/<partition> before <offset> with KafkaJS's
// admin.deleteTopicRecords, then prints the partition's offsets as admin.fetchTopicOffsets
// answers them: [{"partition", "low", "high"}].
// usage: node delete_records.js <bootstrap> <topic> <partition> <offset>
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, partition, offset] = process.argv.slice(2)

async function main() {
  const kafka = new Kafka({ clientId: 'kraftwerk-delete-records', brokers: bootstrap.split(','), logLevel: logLevel.ERROR })
  const admin = kafka.admin()
  await admin.connect()
  // deleteTopicRecords finds leaders in the metadata KafkaJS already holds, which starts empty.
  await admin.fetchTopicOffsets(topic)
  await admin.deleteTopicRecords({ topic, partitions: [{ partition: Number(partition), offset }] })
  const offsets = await admin.fetchTopicOffsets(topic)
  await admin.disconnect()
  process.stdout.write(JSON.stringify(offsets.map(o => ({ partition: o.partition, low: Number(o.low), high: Number(o.high) }))))
}

main().catch(err => { console.error(err); process.exit(1) })
