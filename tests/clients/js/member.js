// A member of <group> that consumes <topic> with KafkaJS's Consumer until it is sent SIGTERM,
// commits each message it read before it takes the next, then leaves the group.
// usage: node member.js <bootstrap> <topic> <group> <assigner> <sessionTimeoutMs> <heartbeatIntervalMs>
//
// Output, one JSON object a line:
//   {"partition": 0, "offset": 0, "value": "..."}    each message read
//   {"error": "...", "namespace": "...", ...}        each ERROR KafkaJS logs, and a crash
//   {"rebalance": "..."}                             a Heartbeat or SyncGroup answered REBALANCE_IN_PROGRESS
//   {"closed": true, "consumed": 10}                 once the member has left the group
const { Kafka, logLevel, PartitionAssigners } = require('kafkajs')

const [bootstrap, topic, group, assigner, sessionTimeout, heartbeatInterval] = process.argv.slice(2)
const ASSIGNERS = { roundrobin: PartitionAssigners.roundRobin }
// KafkaJS's Connection logs every error a broker answers at ERROR, REBALANCE_IN_PROGRESS
// included, with which a Kafka coordinator tells members that a rebalance started: answering
// their Heartbeat, and their pending SyncGroup when a member joins or leaves before the
// assignment is synced. Those answers are how the protocol works, not failures; KafkaJS rejoins.
const REBALANCING = 'The group is rebalancing, so a rejoin is needed'
const TOLD_TO_REJOIN = /^Response (Heartbeat|SyncGroup)\(/

const print = line => process.stdout.write(JSON.stringify(line) + '\n')

// Every entry KafkaJS logs at ERROR, with what it said of the error.
const logCreator = () => ({ namespace, log }) => {
  const { message, error, ...rest } = log
  if (namespace === 'Connection' && TOLD_TO_REJOIN.test(message) && error === REBALANCING) {
    print({ rebalance: message })
    return
  }
  print({ error: `${message}${error ? `: ${error}` : ''}`, namespace, type: rest.type, broker: rest.broker })
}

async function main() {
  if (!(assigner in ASSIGNERS)) throw new Error(`unknown assigner ${assigner}: KafkaJS has ${Object.keys(ASSIGNERS)}`)
  const kafka = new Kafka({ clientId: 'kraftwerk-member', brokers: bootstrap.split(','), logLevel: logLevel.ERROR,
    logCreator })
  const consumer = kafka.consumer({ groupId: group, partitionAssigners: [ASSIGNERS[assigner]],
    sessionTimeout: Number(sessionTimeout), heartbeatInterval: Number(heartbeatInterval),
    // Leaving waits for the fetch under way, which waits this long for messages that may not come.
    maxWaitTimeInMs: 500 })
  consumer.on(consumer.events.CRASH, ({ payload }) => print({ error: `crash: ${payload.error}`, namespace: 'crash' }))
  let consumed = 0
  const stop = async () => {
    await consumer.disconnect()
    print({ closed: true, consumed })
    process.exit(0)
  }
  process.once('SIGTERM', () => stop().catch(fail))
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      print({ partition, offset: Number(message.offset), value: message.value.toString() })
      consumed += 1
      await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }])
    },
  })
}

function fail(err) {
  console.error(err)
  process.exit(1)
}

main().catch(fail)
