// Produces the messages given on stdin (JSON) with KafkaJS's producer, then reads every
// partition back with KafkaJS's own broker Fetch, and prints what was acknowledged and read.
//
// KafkaJS's Consumer always joins a group; the group coordinator is not built yet, so the
// read side uses the Cluster/Broker objects KafkaJS's consumer itself fetches with.
// usage: node roundtrip.js <bootstrap> <topic> <partitions> < messages.json
const { Kafka, CompressionTypes, Partitioners, logLevel } = require('kafkajs')

const [bootstrap, topic, partitionCount] = process.argv.slice(2)

async function readStdin() {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  return JSON.parse(Buffer.concat(chunks).toString())
}

async function produce(kafka, messages) {
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  const delivered = []
  const half = Math.floor(messages.length / 2)
  for (const [compression, chunk] of [[CompressionTypes.None, messages.slice(0, half)],
                                      [CompressionTypes.GZIP, messages.slice(half)]]) {
    // One send per message keeps acknowledgements per message; batches still form per partition.
    const results = await Promise.all(chunk.map(m => producer.send({
      topic, acks: -1, compression, messages: [{ key: m.key, value: m.value, headers: m.headers, timestamp: m.timestamp }],
    })))
    for (const [result] of results) delivered.push({ partition: result.partition, offset: Number(result.baseOffset) })
  }
  await producer.disconnect()
  return delivered
}

async function readPartition(cluster, partition) {
  const consumed = []
  let offset = 0
  for (;;) {
    await cluster.refreshMetadataIfNecessary()
    const leaders = cluster.findLeaderForPartitions(topic, [partition])
    const broker = await cluster.findBroker({ nodeId: Object.keys(leaders)[0] })
    const response = await broker.fetch({
      maxWaitTime: 100, minBytes: 1, isolationLevel: 0,
      topics: [{ topic, partitions: [{ partition, fetchOffset: String(offset), maxBytes: 1048576 }] }],
    })
    const data = response.responses[0].partitions[0]
    if (data.errorCode !== 0) throw new Error(`fetch error ${data.errorCode}`)
    for (const m of data.messages) {
      if (Number(m.offset) < offset) continue
      const headers = Object.entries(m.headers || {}).map(([k, v]) => [k, v.toString()])
      consumed.push({ key: m.key.toString(), value: m.value.toString(), headers, timestamp: m.timestamp,
                      partition, offset: m.offset })
      offset = Number(m.offset) + 1
    }
    if (offset >= Number(data.highWatermark)) return consumed
  }
}

async function main() {
  const kafka = new Kafka({ clientId: 'kraftwerk-roundtrip', brokers: bootstrap.split(','), logLevel: logLevel.ERROR })
  const delivered = await produce(kafka, await readStdin())
  const createCluster = Object.getOwnPropertySymbols(kafka).find(s => s.description === 'private:Kafka:createCluster')
  const cluster = kafka[createCluster]({ metadataMaxAge: 300000, allowAutoTopicCreation: false })
  await cluster.connect()
  await cluster.addTargetTopic(topic)
  const consumed = []
  for (let p = 0; p < Number(partitionCount); p++) consumed.push(...await readPartition(cluster, p))
  await cluster.disconnect()
  process.stdout.write(JSON.stringify({ delivered, consumed }))
}

main().catch(err => { console.error(err); process.exit(1) })
