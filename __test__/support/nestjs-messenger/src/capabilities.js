'use strict';

// Optional transport capabilities are detected by duck typing: a capability is present
// when the named property is a function.

/** True when `value.getMessageCount` is a function. */
function isMessageCountAware(value) {
  return typeof value?.getMessageCount === 'function';
}

/** True when `value.list` is a function. */
function isListableReceiver(value) {
  return typeof value?.list === 'function';
}

/** True when `value.find` is a function. */
function isMessageRetriever(value) {
  return typeof value?.find === 'function';
}

module.exports = { isMessageCountAware, isListableReceiver, isMessageRetriever };
